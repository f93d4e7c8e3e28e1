"""The command that adds an optional extra (`otel`, `postgres`) to the environment ollama-tap
runs in, for the errors that say an extra is missing.

ollama-tap is installed from a clone, not from PyPI, so `pip install 'ollama-tap[otel]'` finds
nothing, and `pip install '.[otel]'` builds the whole package again (the compiled modules
included: minutes). Installing the extra's own requirements, read from the installed
package's metadata, into this very environment does neither. The installer is the one that
made the environment: pipx's `inject` for a pipx install, uv's pip for a `uv tool install`,
else this interpreter's pip (a venv, `make run`'s .venv included).
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from pathlib import Path
from typing import Final

DISTRIBUTION: Final = "ollama-tap"
_EXTRA_MARKER: Final = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def requirements(extra: str) -> list[str]:
    """The requirements the extra adds (as pyproject.toml states them), from the metadata."""
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found = []
    for line in declared:
        spec, _, marker = line.partition(";")
        if any(name == extra for name in _EXTRA_MARKER.findall(marker)):
            found.append(spec.strip())
    return found


def install_command(extra: str, prefix: str | None = None, python: str | None = None) -> str:
    """A shell command that adds `extra` to the environment at `prefix` (sys.prefix)."""
    prefix = prefix or sys.prefix
    python = python or sys.executable
    wanted = requirements(extra)
    if not wanted:  # not installed as a distribution (run from the source tree)
        return f"{shlex.quote(python)} -m pip install '.[{extra}]' (from the clone)"
    args = " ".join(shlex.quote(r) for r in wanted)
    parts = Path(prefix).parts
    if "pipx" in parts and "venvs" in parts:
        return f"pipx inject {DISTRIBUTION} {args}"
    if "uv" in parts and "tools" in parts:
        return f"uv pip install --python {shlex.quote(python)} {args}"
    return f"{shlex.quote(python)} -m pip install {args}"

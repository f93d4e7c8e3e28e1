"""Builds the modules every relayed chunk goes through with mypyc (README "Installing"; the
list is ollama_tap.compiled.MODULES).

OLLAMA_TAP_PURE_PYTHON=1 installs them as plain Python, as happens (with a warning) where
there is no C compiler or no Python headers. Each compiling build records the hashes of
the sources it compiled against (ollama_tap.compiled.RECORD), which the compiled test pass
checks.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # ollama_tap.compiled: the module list and the source record

from ollama_tap import compiled  # noqa: E402


def _can_compile() -> bool:
    # The compiler setuptools will run: $CC, else the one Python was built with.
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    compiler = shutil.which(command.split()[0])
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    if not (compiler and headers):
        print(
            "ollama-tap: no C compiler or no Python headers; installing plain Python "
            "(install gcc and python3-dev for the compiled build)",
            file=sys.stderr,
        )
    return bool(compiler and headers)


if os.environ.get("OLLAMA_TAP_PURE_PYTHON", "").lower() in {"1", "true", "yes"} or not (
    _can_compile()
):
    setup()
else:
    from mypyc.build import mypycify

    (ROOT / compiled.RECORD).write_text(json.dumps(compiled.source_hashes(ROOT), indent=0))
    # Errors in the modules the compiled ones import but that are not compiled themselves
    # are `make typecheck`'s business: silenced here, so a build without the extras (no
    # opentelemetry, no psycopg to type them against) compiles the same fast path.
    options = ["--follow-imports=silent"]
    setup(ext_modules=mypycify([*options, *compiled.MODULES], opt_level="3", debug_level="0"))

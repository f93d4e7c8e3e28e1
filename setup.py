"""Builds the modules every request and token goes through with mypyc (README "Installing").

OLLAMA_TAP_PURE_PYTHON=1 installs them as plain Python, as happens (with a warning) where
there is no C compiler or no Python headers. Each compiling build records the hashes of
the sources it compiled in .compiled-sources, which the test suite checks: an extension
module is imported before the .py beside it, so a stale build would shadow an edit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup

HOT = [
    "proxy/exchange.py",
    "proxy/framing.py",
    "proxy/ollama.py",
    "proxy/hooks.py",
    "proxy/histogram.py",
    "proxy/names.py",
    "proxy/accesslog.py",
    "proxy/forward.py",
    "proxy/metrics.py",
    "proxy/fastrelay/front.py",
    "proxy/fastrelay/frontrelay.py",
    "proxy/fastrelay/reply.py",
    "proxy/fastrelay/pool.py",
    "proxy/fastrelay/wire.py",
    "proxy/fastrelay/relay.py",
    "proxy/fastrelay/connection.py",
    "proxy/recorder/__init__.py",
    "proxy/recorder/scope.py",
    "proxy/recorder/timeline.py",
]
"""What runs on the event loop per request and per token. Not the recorder's writer thread
(record, redact, writer): compiled code never offers the GIL to other threads on its own,
so a large body being scrubbed there would stall the loop for its whole length."""

ROOT = Path(__file__).resolve().parent


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


def _record_sources() -> None:
    sources = {
        str(path.relative_to(ROOT)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((ROOT / "proxy").rglob("*.py"))
    }
    (ROOT / ".compiled-sources").write_text(json.dumps(sources, indent=0))


if os.environ.get("OLLAMA_TAP_PURE_PYTHON", "").lower() in {"1", "true", "yes"} or not (
    _can_compile()
):
    setup()
else:
    from mypyc.build import mypycify

    _record_sources()
    setup(ext_modules=mypycify(HOT, opt_level="3", debug_level="0"))

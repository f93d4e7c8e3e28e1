"""Every command but `serve` starts without the server stack: --help stays quick."""

from __future__ import annotations

import subprocess
import sys

SERVER_STACK = ("aiohttp.web", "uvloop", "ollama_tap.serve", "ollama_tap.app")


def test_the_parser_loads_no_server_stack() -> None:
    probe = (
        "import sys; from ollama_tap.cli import build_parser; build_parser(); "
        f"print(' '.join(m for m in {SERVER_STACK!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []

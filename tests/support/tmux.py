"""A command on a real terminal: a tmux window of a given size, its screen read back.

tmux is one of the suite's system tools (`make system-deps` installs it when absent); a
test that needs it is skipped with that fix when it is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


class Terminal:
    """One tmux server on its own socket under `where`, one window of `width`×`height`."""

    def __init__(self, where: Path, width: int = 80, height: int = 24) -> None:
        if shutil.which("tmux") is None:
            import pytest

            pytest.skip("tmux is not installed (`make system-deps` or apt-get install tmux)")
        self.width, self.height = width, height
        self.tmux = ["tmux", "-S", str(where / "tmux.sock"), "-f", "/dev/null"]

    def start(self, command: str, env: dict[str, str] | None = None) -> None:
        """Run a shell command in the window (COLUMNS and LINES are the window's own)."""
        base = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "LINES", "TMUX"}}
        size = ["-x", str(self.width), "-y", str(self.height)]
        subprocess.run(
            [*self.tmux, "new-session", "-d", *size, command],
            check=True, env={**base, **(env or {})}, timeout=20,
        )  # fmt: skip

    def screen(self, joined: bool = False) -> list[str]:
        """The window's lines; `joined`: a line the terminal wrapped is one line again."""
        flags = ["-p", "-J"] if joined else ["-p"]
        done = subprocess.run(
            [*self.tmux, "capture-pane", *flags], check=True, capture_output=True, text=True,
            timeout=20,
        )  # fmt: skip
        return done.stdout.rstrip("\n").splitlines()

    def stop(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False, timeout=20, capture_output=True)


def ollama_tap(*argv: str) -> str:
    """The shell words that run `ollama-tap ARGV` with this Python."""
    return " ".join([sys.executable, "-m", "ollama_tap", *argv])


def printed(where: Path, argv: list[str], width: int = 80, height: int = 24) -> list[str]:
    """The screen once `ollama-tap ARGV` has finished in a `width`×`height` window."""
    term = Terminal(where, width, height)
    done = where / "done"
    done.unlink(missing_ok=True)
    term.start(ollama_tap(*argv) + f"; touch {done}; sleep 60")
    try:
        for _ in range(300):
            if done.exists():
                break
            time.sleep(0.05)
        assert done.exists(), "the command did not finish in tmux"
        return term.screen()
    finally:
        term.stop()

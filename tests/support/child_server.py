"""A real server run as a child process for a test session: started, awaited, stopped.

The real-engine tiers (llama-server in tests/engine, `ollama serve` in tests/ollama_real)
start their server the same way: its output to a log file, then a GET of one URL polled until
it answers 200; a server that exits or never answers fails the tier with the end of its log
(what a developer needs to see why), and at the end it gets SIGTERM, then SIGKILL if it has
not left within a grace period.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

LOG_TAIL = 3000
"""How much of a failed server's log a failure shows, in characters."""


def answers(url: str) -> bool:
    """Whether a GET of `url` gets a 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL:]


@contextmanager
def child_server(
    name: str,
    command: Sequence[str],
    ready: str,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    within: float = 60,
    grace: float = 15,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `command` (stdout and stderr to `log`) until the block ends; enter the block once
    a GET of `ready` answers 200. `within` bounds the wait only to end a hang: a server that
    exits early fails at once, with its exit status."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + within
        while not answers(ready):
            if (code := proc.poll()) is not None:
                pytest.fail(f"{name} exited ({code}) before answering; its log:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not answer within {within:g} s; its log:\n{log_tail(log)}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

"""`ollama-tap serve` as a real subprocess, for the tests that need signals and exit codes."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Final

import aiohttp

ADMIN_TOKEN = "test-admin-token"
STARTUP_SECONDS: Final = 120.0
"""How long `serve` waits for the proxy's first answer: half a second on an idle machine,
tens of seconds on a loaded 2-core one (the interpreted imports). A proxy that exits fails
at once."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _limited(nofile: tuple[int, int]) -> list[str]:
    """A command prefix that runs what follows with RLIMIT_NOFILE = `nofile` (soft, hard)."""
    code = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, {nofile!r}); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    return [sys.executable, "-c", code]


async def serve(
    upstream: str,
    db: Path,
    *flags: str,
    capture: bool = False,
    tls: bool = False,
    nofile: tuple[int, int] | None = None,
) -> tuple[asyncio.subprocess.Process, str]:
    """Start `ollama-tap serve` in front of `upstream`; return once it answers healthz.

    With `capture`, stderr (the JSON log) is piped for the test to read after exit; with
    `tls`, the flags carry a certificate and the URL is https (not verified: self-signed);
    with `nofile`, it starts with that limit on open files (soft, hard).
    """
    port = free_port()
    python = _limited(nofile) if nofile is not None else [sys.executable]
    env = {**os.environ, "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN, "OLLAMA_TAP_DB": str(db)}
    stderr = asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(
        *python, "-m", "ollama_tap", "serve", "--port", str(port), "--upstream", upstream,
        *flags, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
    )  # fmt: skip
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    async with aiohttp.ClientSession() as s:
        while proc.returncode is None and time.monotonic() < deadline:
            try:
                async with s.get(f"{url}/_tap/healthz", ssl=False):
                    return proc, url
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
    if proc.returncode is not None:
        raise AssertionError(f"ollama-tap exited ({proc.returncode}) before it answered")
    proc.kill()
    await proc.wait()
    raise AssertionError(f"ollama-tap did not answer within {STARTUP_SECONDS:g} s")

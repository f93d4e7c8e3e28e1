"""`ollama-tap serve` as a real subprocess, for the tests that need signals and exit codes."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import aiohttp

ADMIN_TOKEN = "test-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def serve(
    upstream: str, db: Path, *flags: str, capture: bool = False, tls: bool = False
) -> tuple[asyncio.subprocess.Process, str]:
    """Start `ollama-tap serve` in front of `upstream`; return once it answers healthz.

    With `capture`, stderr (the JSON log) is piped for the test to read after exit; with
    `tls`, the flags carry a certificate and the URL is https (not verified: self-signed).
    """
    port = free_port()
    env = {**os.environ, "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN, "OLLAMA_TAP_DB": str(db)}
    stderr = asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream,
        *flags, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
    )  # fmt: skip
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(f"{url}/_tap/healthz", ssl=False):
                    return proc, url
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("ollama-tap did not start")

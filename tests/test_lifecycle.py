"""`ollama-tap serve` starting on a busy port and stopping on Ctrl-C, as a real process."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from ollama_tap.recorder.store import Filters, Store
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.serve_process import ADMIN_TOKEN, serve


def test_a_busy_port_is_one_line_naming_the_holder_and_the_fix(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN,
               "OLLAMA_TAP_DB": str(tmp_path / "r.db")}  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "ollama_tap", "serve", "--port", str(port)],
            env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        took = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # On a machine of its own, the wall time is the CPU time; on a shared one (other test
    # runs, builds), the CPU time is what the refusal costs.
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert min(took, cpu) < 2, f"took {took:.1f} s ({cpu:.1f} s of CPU) to say the port is busy"
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"ollama-tap: 127.0.0.1:{port} is in use by pid {os.getpid()} (")
    assert "python" in line or "pytest" in line  # this test run's own command line
    assert line.endswith("); stop it, or listen elsewhere with --port (OLLAMA_TAP_PORT)")
    assert not (tmp_path / "r.db").exists(), "nothing started before the port was known free"


async def _line_with(stream: asyncio.StreamReader, text: str, seconds: float = 10) -> str:
    async with asyncio.timeout(seconds):
        while line := (await stream.readline()).decode():
            if text in line:
                return line.rstrip("\n")
    raise AssertionError(f"no line with {text!r}")


async def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    fake_ollama.script = Script(tokens=["t"] * 2000, token_delay=0.02)
    db = tmp_path / "r.db"
    proc, url = await serve(fake_ollama.url, db, "--shutdown-grace", "30", capture=True)
    assert proc.stderr is not None
    body = {"model": "llama3.2", "prompt": "x"}
    async with aiohttp.ClientSession() as s:
        streams = [await s.post(f"{url}/api/generate", json=body) for _ in range(2)]
        for resp in streams:
            await resp.content.readline()
        await _line_with(proc.stderr, '"listening"')
        proc.send_signal(signal.SIGINT)
        said = await _line_with(proc.stderr, "waiting up to")
        assert said == (
            "ollama-tap: waiting up to 30 s for 2 requests in flight; Ctrl-C again to stop now"
        )
        await asyncio.sleep(0.5)
        assert proc.returncode is None, "the first Ctrl-C waits for the streams"
        loop = asyncio.get_running_loop()
        sent = loop.time()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        took = loop.time() - sent
        for resp in streams:
            resp.close()
    assert took < 2, f"the second Ctrl-C took {took:.1f} s to stop"
    rest = (await proc.stderr.read()).decode()
    assert "ollama-tap: stopping now; 2 requests cut, recorded as shutdown" in rest
    records, _ = Store(db).page(Filters(), 10)
    assert [(r["outcome"], r["model"]) for r in records] == [("shutdown", "llama3.2:latest")] * 2

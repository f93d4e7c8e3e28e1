"""A PostgreSQL server that accepts connections and never answers: reads get a 503 in
bounded time, the stuck write is said in the log, and SIGTERM ends the proxy."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import ollama
import orjson

from tests.support.fake_ollama import FakeOllama
from tests.support.postgres import PgServer
from tests.support.serve_process import ADMIN_TOKEN, serve

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _read(url: str) -> int:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/_tap/api/records?limit=1", headers=AUTH) as resp:
            return resp.status


async def test_a_stopped_server_bounds_reads_and_shutdown(
    fake_ollama: FakeOllama,
    tmp_path: Path,
    own_server: PgServer,
) -> None:
    url = await asyncio.to_thread(own_server.new_database)
    proc, base = await serve(
        fake_ollama.url, tmp_path / "unused.db", "--db", url, "--db-timeout", "2",
        "--shutdown-grace", "1", capture=True,
    )  # fmt: skip
    try:
        await ollama.AsyncClient(host=base).generate("llama3.2", "hi")
        assert await asyncio.wait_for(_read(base), 30) == 200
        await asyncio.to_thread(own_server.freeze)
        for _ in range(5):  # relaying never waits on the database
            await asyncio.wait_for(ollama.AsyncClient(host=base).generate("llama3.2", "hi"), 30)
        # Reads hung past 30 s: now each is a 503 once --db-timeout passed (six: more than
        # the reads that may be stuck at once, so the last ones wait for a slot).
        statuses = await asyncio.wait_for(asyncio.gather(*(_read(base) for _ in range(6))), 60)
        assert statuses == [503] * 6
        await asyncio.sleep(4)  # the writer's stuck insert is noticed and said
        proc.send_signal(signal.SIGTERM)
        # It stayed alive until the database came back; now it ends within the grace and
        # the recorder's stop timeout (wide margins: a loaded machine).
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        await asyncio.to_thread(own_server.thaw)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    events = [orjson.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    names = [e["event"] for e in events]
    assert "recorder_store_unavailable" in names
    assert "recorder_stop_timeout" in names

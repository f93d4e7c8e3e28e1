"""Taps sharing one PostgreSQL database, with the official client sending through them:
instances told apart, migrations once, a server away mid-traffic, a tap SIGKILLed, and
credentials that are used but never printed."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import ollama
import orjson
import psycopg
import pytest

from ollama_tap.cli import main
from ollama_tap.recorder.pg_schema import VERSION
from ollama_tap.recorder.store import Filters, Store
from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama
from tests.support.postgres import PASSWORD, PASSWORD_USER, PgServer
from tests.support.records import records
from tests.support.serve_process import serve
from tests.support.waiting import eventually

SKY = "The sky is blue."


async def _chat(url: str, n: int) -> list[str]:
    client = ollama.AsyncClient(host=url)

    async def one(i: int) -> str:
        stream = await client.chat(
            "llama3.2", messages=[{"role": "user", "content": f"q{i}"}], stream=True
        )
        return "".join([p.message.content or "" async for p in stream])

    return await asyncio.gather(*(one(i) for i in range(n)))


async def _generate(url: str, n: int, expect: str = SKY) -> None:
    client = ollama.AsyncClient(host=url)
    for reply in await asyncio.gather(*(client.generate("llama3.2", "hi") for _ in range(n))):
        assert reply.response == expect


def _export(db: str, out: Path, *flags: str) -> list[dict[str, Any]]:
    assert main(["records", "export", "--db", db, "-o", str(out), *flags]) == 0
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


async def test_two_taps_write_one_database_and_filters_tell_them_apart(
    proxy_factory: MakeProxy, pg_url: str, tmp_path: Path
) -> None:
    a = await proxy_factory(db=pg_url, instance="box-a")
    b = await proxy_factory(db=pg_url, instance="box-b")
    chats, _ = await asyncio.gather(_chat(a.url, 10), _generate(b.url, 10))
    assert chats == [SKY] * 10
    both = await records(a, 20, limit="100")
    assert len(both) == 20 and len({r["id"] for r in both}) == 20
    assert Counter(r["instance"] for r in both) == {"box-a": 10, "box-b": 10}
    assert {r["upstream"] for r in both} == {str(a.settings.upstream_url)}
    only_b = await records(a, 10, instance="box-b")  # tap A's API reads tap B's records
    assert {(r["instance"], r["endpoint"]) for r in only_b} == {("box-b", "/api/generate")}
    exported = await asyncio.to_thread(_export, pg_url, tmp_path / "a.jsonl", "--instance", "box-a")
    assert len(exported) == 10
    assert {(r["instance"], r["output"]) for r in exported} == {("box-a", SKY)}


async def test_two_taps_starting_at_once_migrate_once(fake_ollama: FakeOllama, pg_url: str) -> None:
    started = await asyncio.gather(*(serve(fake_ollama.url, pg_url) for _ in range(2)))  # type: ignore[arg-type]
    try:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT version FROM ollama_tap_migrations").fetchall()
        assert sorted(v for (v,) in rows) == list(range(1, VERSION + 1))
        await asyncio.gather(*(_generate(url, 2) for _, url in started))
        store = Store(pg_url)
        await eventually(lambda: len(store.page(Filters(), 10)[0]) == 4, within=10)
        store.close()
    finally:
        for proc, _ in started:
            proc.terminate()
            await proc.wait()


async def test_a_server_stopped_mid_traffic_costs_the_streams_nothing(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    own_server: PgServer,
) -> None:
    url = await asyncio.to_thread(own_server.new_database)
    proxy = await proxy_factory(db=url, recorder_queue=30)
    fake_ollama.script.tokens = [f" t{i}" for i in range(20)]
    fake_ollama.script.token_delay = 0.05
    streams = asyncio.create_task(_chat(proxy.url, 5))
    await asyncio.sleep(0.3)
    await asyncio.to_thread(own_server.stop)  # while the five streams run
    replies = await streams
    reply = "".join(fake_ollama.script.tokens)
    assert replies == [reply] * 5
    fake_ollama.script.token_delay = 0.0
    await _generate(proxy.url, 60, reply)  # the server is away: 30 queue, the rest are dropped
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{proxy.url}/_tap/api/records", headers=_auth()) as resp:
            assert resp.status == 503
            assert "cannot be reached" in (await resp.json())["error"]
    dropped = proxy.sample("ollama_tap_records_dropped_total") or 0
    assert dropped >= 25
    assert (proxy.sample("ollama_tap_recorder_write_errors_total") or 0) >= 1
    await asyncio.to_thread(own_server.start)
    depth = "ollama_tap_recorder_queue_depth"
    await eventually(lambda: proxy.sample(depth) == 0, within=15)  # writing by itself again
    await _generate(proxy.url, 5, reply)
    assert proxy.sample("ollama_tap_records_dropped_total") == dropped
    want = 70 - int(dropped)
    stored = await records(proxy, want, limit="1000")
    assert len(stored) == want == len({r["id"] for r in stored})


def _auth() -> dict[str, str]:
    from tests.support.records import AUTH

    return AUTH


async def test_sigkill_under_load_leaves_a_sound_database(
    fake_ollama: FakeOllama, pg_url: str
) -> None:
    proc, url = await serve(fake_ollama.url, pg_url)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as s:

        async def one() -> None:
            body = {"model": "llama3.2", "prompt": "x", "stream": False}
            async with s.post(f"{url}/api/generate", json=body) as resp:
                await resp.read()

        async def load() -> None:
            while True:
                await asyncio.gather(*(one() for _ in range(20)))

        task = asyncio.create_task(load())
        await asyncio.sleep(1.5)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    store = Store(pg_url)
    stored = await asyncio.to_thread(lambda: list(store.each(Filters())))
    assert stored
    assert all(r["output"] == SKY and r["outcome"] == "ok" for r in stored)
    # The killed tap held no lock that outlives it: a new tap starts and records.
    proc, url = await serve(fake_ollama.url, pg_url)  # type: ignore[arg-type]
    try:
        await _generate(url, 1)
        await eventually(lambda: len(list(store.each(Filters()))) == len(stored) + 1, within=10)
    finally:
        proc.terminate()
        await proc.wait()
    store.close()


@pytest.mark.parametrize("where", ["url", "PGPASSWORD", "pgpass"])
async def test_the_password_is_used_and_never_printed(
    fake_ollama: FakeOllama,
    pg_url: str,
    pg_server: PgServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    name = pg_url.rsplit("/", 1)[1]
    db = f"postgresql://{PASSWORD_USER}@127.0.0.1:{pg_server.port}/{name}"
    if where == "url":
        db = db.replace("@", f":{PASSWORD}@", 1)
    elif where == "PGPASSWORD":
        monkeypatch.setenv("PGPASSWORD", PASSWORD)
    else:
        pgpass = tmp_path / "pgpass"
        pgpass.write_text(f"127.0.0.1:{pg_server.port}:{name}:{PASSWORD_USER}:{PASSWORD}\n")
        os.chmod(pgpass, 0o600)
        monkeypatch.setenv("PGPASSFILE", str(pgpass))
    proc, url = await serve(fake_ollama.url, db, "--log-level", "debug", capture=True)  # type: ignore[arg-type]
    await _generate(url, 1)
    store = Store(pg_url)  # the superuser's view: trusted, no password
    await eventually(lambda: len(store.page(Filters(), 5)[0]) == 1, within=10)
    store.close()
    proc.terminate()
    assert proc.stderr is not None
    stderr = (await proc.stderr.read()).decode()
    await proc.wait()
    assert f"postgresql://{PASSWORD_USER}@127.0.0.1:{pg_server.port}/{name}" in stderr
    assert PASSWORD not in stderr

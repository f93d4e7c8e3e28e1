"""Recording through the real proxy with the official client: outcomes, privacy, access,
shutdown mid-stream and a SIGKILL under load."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import ollama
import orjson
import pytest
from yarl import URL

from ollama_tap.recorder.store import Filters, Store
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import AUTH, records
from tests.support.serve_process import serve
from tests.support.spy import Spy

SECRET = "sk-live-CLIENT-SECRET"
JSON = {"Content-Type": "application/json"}


async def test_stream_recorded_with_timeline_and_no_credential(proxy: Proxy) -> None:
    client = ollama.AsyncClient(host=proxy.url, headers={"Authorization": f"Bearer {SECRET}"})
    stream = await client.chat(
        "llama3.2", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join([p.message.content or "" async for p in stream]) == "The sky is blue."
    [summary] = await records(proxy, 1)
    assert (summary["outcome"], summary["model"], summary["status"]) == (
        "ok",
        "llama3.2:latest",
        200,
    )
    url = f"{proxy.url}/_tap/api/records/{summary['id']}"
    async with aiohttp.ClientSession(headers=AUTH) as s, s.get(url) as resp:
        record = await resp.json()
    assert record["output"] == "The sky is blue."
    assert len(record["timeline"]["offsets"]) == 5
    assert record["eval_tokens"] == 5
    assert record["total"] is not None
    assert "authorization" not in {k.lower() for k in record["request"]["headers"]}
    db = b"".join(p.read_bytes() for p in proxy.settings.db_path.parent.glob("records.db*"))
    assert SECRET.encode() not in db


async def test_legacy_embeddings_are_recorded_with_unknown_tokens(proxy: Proxy) -> None:
    # Ollama's /api/embeddings reply is the vector alone: no count is 0, but unknown.
    client = ollama.AsyncClient(host=proxy.url)
    assert (await client.embeddings("all-minilm", "a")).embedding
    [summary] = await records(proxy, 1)
    assert (summary["outcome"], summary["endpoint"]) == ("ok", "/api/embeddings")
    assert (summary["prompt_tokens"], summary["eval_tokens"]) == (None, None)


async def test_api_needs_the_token_also_on_loopback(proxy: Proxy) -> None:
    async with aiohttp.ClientSession() as s:
        for headers, status in (({}, 401), ({"Authorization": "Bearer no"}, 401), (AUTH, 200)):
            async with s.get(f"{proxy.url}/_tap/api/records", headers=headers) as resp:
                assert resp.status == status
        async with s.get(f"{proxy.url}/_tap/healthz") as resp:
            assert resp.status == 200


async def test_errors_and_generate_context(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    reply = await client.generate("llama3.2", "hi")
    with pytest.raises(ollama.ResponseError):
        await client.generate("no-such-model", "hi")
    fake_ollama.script.error_after = 2
    with pytest.raises(ollama.ResponseError):
        async for _ in await client.generate("llama3.2", "hi", stream=True):
            pass
    newest_first = await records(proxy, 3)
    assert [r["outcome"] for r in newest_first] == ["stream_error", "upstream_error", "ok"]
    assert newest_first[0]["error_message"] == fake_ollama.script.error_message
    assert newest_first[2]["context_len"] == len(reply.context or [])


async def test_client_disconnecting_mid_stream(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script.tokens = [f" t{i}" for i in range(200)]
    fake_ollama.script.token_delay = 0.02
    async with aiohttp.ClientSession() as s:
        resp = await s.post(f"{proxy.url}/api/generate", json={"model": "llama3.2", "prompt": "x"})
        await resp.content.readline()
        await resp.content.readline()
        resp.close()
    [record] = await records(proxy, 1)
    assert record["outcome"] == "client_disconnected"
    assert 2 <= record["chunks"] < 200


async def read_all(db: Path) -> tuple[str, list[dict[str, Any]]]:
    def run() -> tuple[str, list[dict[str, Any]]]:
        with sqlite3.connect(db) as conn:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        return ok, list(Store(db).each(Filters()))

    return await asyncio.to_thread(run)


async def test_proxy_shut_down_mid_stream(fake_ollama: FakeOllama, tmp_path: Path) -> None:
    fake_ollama.script.tokens = [f" t{i}" for i in range(500)]
    fake_ollama.script.token_delay = 0.02
    proc, url = await serve(fake_ollama.url, tmp_path / "r.db", "--shutdown-grace", "0.3")
    async with aiohttp.ClientSession() as s:
        resp = await s.post(f"{url}/api/generate", json={"model": "llama3.2", "prompt": "x"})
        await resp.content.readline()
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(aiohttp.ClientPayloadError):
            async for _ in resp.content:
                pass
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    ok, stored = await read_all(tmp_path / "r.db")
    assert ok == "ok"
    assert [(r["outcome"], r["endpoint"]) for r in stored] == [("shutdown", "/api/generate")]
    assert 1 <= stored[0]["chunks"] < 500


async def test_sigkill_under_load_leaves_a_sound_database(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    proc, url = await serve(fake_ollama.url, tmp_path / "r.db")
    async with aiohttp.ClientSession() as s:

        async def one() -> None:
            body = {"model": "llama3.2", "prompt": "x", "stream": False}
            async with s.post(f"{url}/api/generate", json=body) as resp:
                await resp.read()

        async def load() -> None:
            while True:
                await asyncio.gather(*(one() for _ in range(20)))

        task = asyncio.create_task(load())
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    ok, stored = await read_all(tmp_path / "r.db")
    assert ok == "ok"
    assert stored
    assert all(r["output"] == "The sky is blue." for r in stored)


async def test_credentials_in_paths_queries_and_bodies_are_relayed_but_never_kept(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    with_param = "/api/generate;token=PSECRET-path?jwt=QSECRET-1&bearer=QSECRET-2"
    with_query = "/api/generate?pass=QSECRET-3&api_key;x=QSECRET-4&stream=0"
    body = {"model": "llama3.2", "prompt": "hi", "stream": False, "api_key": "BSECRET-5"}
    async with aiohttp.ClientSession() as s:
        for target in (with_param, with_query):
            url = URL(proxy.url + target, encoded=True)
            async with s.post(url, data=orjson.dumps(body), headers=JSON) as resp:
                await resp.read()
    assert [r.path_qs for r in fake_ollama.received if "SECRET" in r.path_qs] == [
        with_param,
        with_query,
    ]  # the relayed bytes are the client's
    assert fake_ollama.received[-1].body == orjson.dumps(body)
    listed = await records(proxy, 2)
    ended = await spy.wait_ended(2)
    assert {ex.path for ex in ended} == {"/api/generate;token=[redacted]", "/api/generate"}
    assert {r["path"] for r in listed} == {"/api/generate;token=[redacted]", "/api/generate"}
    [full] = [r for r in listed if r["path"] == "/api/generate"]
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(f"{proxy.url}/_tap/api/records/{full['id']}") as resp:
            record = await resp.json()
    assert record["query"] == "pass=[redacted]&api_key;x=[redacted]&stream=0"
    assert record["request"]["body"]["json"]["api_key"] == "[redacted]"
    db = b"".join(p.read_bytes() for p in proxy.settings.db_path.parent.glob("records.db*"))
    assert b"SECRET" not in db

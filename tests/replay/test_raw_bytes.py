"""`replay serve` sends the reply bytes the recorder kept as relayed: what the official
clients got at the wire, byte for byte, embeddings included; and without them (over the
tee limit, metadata mode) the record says so and nothing raw is stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import ollama
import openai
import pytest
from structlog.testing import capture_logs

from ollama_tap.rawreply import RawReply, unpack
from ollama_tap.recorder.store import Store
from tests.conftest import MakeProxy, Proxy
from tests.replay.conftest import StartReplay
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.script import Script
from tests.support.records import records
from tests.support.wiretap import wiretap

MESSAGES = [{"role": "user", "content": "Why is the sky blue?"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
CALL = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value.model_dump()


async def _native(url: str) -> list[Any]:
    client = ollama.AsyncClient(host=url)
    out: list[Any] = [await client.generate("llama3.2", "Why is the sky blue?")]
    out.append(await client.generate("llama3.2", "Why is the sky blue?", stream=False))
    stream = await client.chat("qwen3:8b", messages=MESSAGES, tools=[TOOL], think=True, stream=True)
    out.append([part async for part in stream])
    out.append(await client.embed("all-minilm", ["a", "b"]))
    return _dump(out)


async def _openai(url: str) -> list[Any]:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="ollama")
    stream = await client.chat.completions.create(
        model="qwen3:8b", messages=MESSAGES, stream=True, tools=[TOOL],  # type: ignore[arg-type,list-item]
        stream_options={"include_usage": True},
    )  # fmt: skip
    out: list[Any] = [[c.model_dump() async for c in stream]]
    out.append((await client.embeddings.create(model="all-minilm", input="hi")).model_dump())
    await client.close()
    return out


Drive = Callable[[str], Awaitable[list[Any]]]


async def _at_the_wire(port: int, drive: Drive) -> tuple[list[Any], list[bytes]]:
    """What the client made of the replies, and the reply bodies it was sent."""
    async with wiretap(port) as tap:
        outcomes = await drive(tap.url)
        return outcomes, await tap.bodies()


@pytest.mark.parametrize("drive", [_native, _openai], ids=["ollama", "openai"])
async def test_clients_get_the_recorded_bytes(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay, drive: Drive
) -> None:
    fake_ollama.script = Script(
        thinking=["Rayleigh", " scattering"], tool_calls=[CALL], token_delay=0.002
    )
    outcomes, sent = await _at_the_wire(proxy.port, drive)
    store = Store(proxy.settings.db_path)
    summaries = await records(proxy, len(sent))
    kept = [store.reply_reads(r["id"]) for r in reversed(summaries)]
    assert [b"".join(data for _, data in reads or []) for reads in kept] == sent
    assert all(reads for reads in kept)
    replay = await replay_of(proxy, len(sent), paced=False)
    port = int(replay.url.rsplit(":", 1)[1])
    assert await _at_the_wire(port, drive) == (outcomes, sent)
    assert replay.replayer.misses == 0
    # The API's record stays light: the bytes are not in it, only what was kept of them.
    record = store.get(summaries[0]["id"])
    assert record is not None and "reply_raw" not in record
    assert record["response"]["raw"] == {"kept": True, "size": len(sent[-1]), "reads": 1}


async def test_over_the_limit_nothing_raw_is_kept_and_replay_rebuilds(
    proxy_factory: MakeProxy, replay_of: StartReplay
) -> None:
    proxy = await proxy_factory(reply_tee_limit=1024)
    await ollama.AsyncClient(host=proxy.url).embed("all-minilm", "a")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    first, second = reversed(await records(proxy, 2))
    store = Store(proxy.settings.db_path)
    record = store.get(first["id"])
    assert record is not None and record["response"]["raw"]["kept"] is False
    assert "--reply-tee-limit (1024 bytes)" in record["response"]["raw"]["reason"]
    assert store.reply_reads(first["id"]) is None
    assert store.reply_reads(second["id"])  # a small reply is kept under the same limit
    replay = await replay_of(proxy, 2, paced=False)
    with capture_logs() as logs, pytest.raises(ollama.ResponseError) as refused:
        await ollama.AsyncClient(host=replay.url).embed("all-minilm", "a")
    # The limit kept the reply from being parsed too: nothing to rebuild it from.
    assert refused.value.status_code == 404 and "no stored reply" in refused.value.error
    [rebuilt] = [line for line in logs if line["event"] == "replay_rebuilt"]
    assert rebuilt["id"] == first["id"] and "--reply-tee-limit" in rebuilt["reason"]


async def test_metadata_mode_keeps_no_reply_bytes(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory(record="metadata")
    client = ollama.AsyncClient(host=proxy.url, headers={"Authorization": "Bearer s3cret-token"})
    await client.generate("llama3.2", "hi")
    await client.embed("all-minilm", "a")
    summaries = await records(proxy, 2)
    with sqlite3.connect(proxy.settings.db_path) as conn:
        rows = conn.execute("SELECT reply_raw, doc FROM records").fetchall()
    assert len(rows) == len(summaries) == 2
    assert all(raw is None for raw, _ in rows)
    assert all(b'"raw"' not in doc for _, doc in rows)


async def test_credentials_are_not_in_the_reply_bytes(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory()
    client = ollama.AsyncClient(host=proxy.url, headers={"Authorization": "Bearer s3cret-token"})
    await client.generate("llama3.2", "hi", stream=False)
    [summary] = await records(proxy, 1)
    reads = Store(proxy.settings.db_path).reply_reads(summary["id"])
    assert reads and b'"done":true' in reads[-1][1]
    assert all(b"s3cret" not in data for _, data in reads)


def test_a_tee_packs_its_reads_and_drops_past_its_limit() -> None:
    raw = RawReply(10)
    assert raw.add(b"abc", 5.25) and raw.add(b"defg", 5.5)
    assert unpack(raw.pack(5.0)) == [(0.25, b"abc"), (0.5, b"defg")]
    assert not raw.add(b"hijk", 6.0)
    assert raw.dropped and not raw.body and not len(raw)

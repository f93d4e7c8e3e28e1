"""`replay serve`: what was recorded through the proxy, served back to the same clients."""

from __future__ import annotations

from typing import Any

import aiohttp
import ollama
import openai
import orjson
import pytest

from tests.conftest import Proxy
from tests.replay.conftest import StartReplay
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.script import Script

MESSAGES = [{"role": "user", "content": "Why is the sky blue?"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
CALL = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


async def _raw(url: str, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


def _without_stamps(data: bytes) -> list[Any]:
    """Each line's object, a streamed line's created_at left out (the recorder keeps only
    the final one's)."""
    lines = [orjson.loads(line) for line in data.splitlines() if line]
    return [{k: v for k, v in o.items() if k != "created_at" or o.get("done")} for o in lines]


async def _clients(url: str) -> list[Any]:
    """Generate, chat with tools and thinking (streamed and not), as the official client."""
    client = ollama.AsyncClient(host=url)
    out: list[Any] = [await client.generate("llama3.2", "Why is the sky blue?")]
    stream = await client.chat("qwen3:8b", messages=MESSAGES, tools=[TOOL], think=True, stream=True)
    out.append([part async for part in stream])
    out.append(await client.chat("qwen3:8b", messages=MESSAGES, tools=[TOOL], think=True))
    return [_comparable(o) for o in out]


def _comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    dumped = value.model_dump(exclude_none=True)
    if not dumped.get("done"):
        dumped.pop("created_at", None)
    return dumped


async def test_official_clients_get_what_they_got(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay
) -> None:
    fake_ollama.script = Script(
        thinking=["Rayleigh", " scattering"], tool_calls=[CALL], token_delay=0.002
    )
    recorded = await _clients(proxy.url)
    replay = await replay_of(proxy, 3, paced=False)
    assert await _clients(replay.url) == recorded
    assert recorded[1][0]["message"]["thinking"] == "Rayleigh"
    assert replay.replayer.misses == 0


@pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])
async def test_native_bytes_as_relayed(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay, path: str
) -> None:
    fake_ollama.script = Script(thinking=["Hm", " <ok>"], token_delay=0.002)
    bodies = [
        {"model": "qwen3:8b", "prompt": "Why?", "messages": MESSAGES, "think": True},
        {"model": "llama3.2", "prompt": "Why?", "messages": MESSAGES, "stream": False},
    ]
    recorded = [await _raw(proxy.url, path, body) for body in bodies]
    replay = await replay_of(proxy, 2, paced=False)
    streamed, single = [await _raw(replay.url, path, body) for body in bodies]
    # The final line and a single reply are byte for byte what the client got.
    assert single == recorded[1]
    assert streamed[:2] == recorded[0][:2]
    assert streamed[2].splitlines()[-1] == recorded[0][2].splitlines()[-1]
    assert _without_stamps(streamed[2]) == _without_stamps(recorded[0][2])


async def test_openai_stream_with_the_openai_client(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay
) -> None:
    fake_ollama.script = Script(token_delay=0.002)

    async def deltas(url: str) -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="ollama")
        stream = await client.chat.completions.create(
            model="llama3.2", messages=MESSAGES, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )  # fmt: skip
        # Not kept by the recorder: the id, and the second `created` names (rebuilt from
        # the record's start, it may fall on the next second).
        chunks = [c.model_dump(exclude={"id", "created"}) async for c in stream]
        await client.close()
        return chunks

    recorded = await deltas(proxy.url)
    replay = await replay_of(proxy, 1, paced=False)
    replayed = await deltas(replay.url)
    assert replayed == recorded
    assert replayed[-1]["usage"]["completion_tokens"] == 5


def _events(data: bytes) -> list[Any]:
    """Each SSE event's payload; an object without the `id` and `created` the recorder
    does not keep."""
    out: list[Any] = []
    for event in data.split(b"\n\n"):
        if not event:
            continue
        assert event.startswith(b"data: ")
        payload = event.removeprefix(b"data: ")
        if payload == b"[DONE]":
            out.append(payload)
            continue
        obj = orjson.loads(payload)
        out.append({k: v for k, v in obj.items() if k not in ("id", "created")})
    return out


async def test_openai_bytes_as_relayed(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay
) -> None:
    fake_ollama.script = Script(thinking=["Hm"], tool_calls=[CALL], token_delay=0.002)
    body = {"model": "qwen3:8b", "messages": MESSAGES, "stream": True, "tools": [TOOL]}
    single = {**body, "stream": False}
    recorded = [await _raw(proxy.url, "/v1/chat/completions", b) for b in (body, single)]
    replay = await replay_of(proxy, 2, paced=False)
    replayed = [await _raw(replay.url, "/v1/chat/completions", b) for b in (body, single)]
    assert replayed[0][:2] == recorded[0][:2] == (200, "text/event-stream")
    assert _events(replayed[0][2]) == _events(recorded[0][2])
    assert len(_events(recorded[0][2])) > 5
    assert replayed[1] == recorded[1]  # a single reply: byte for byte

"""The fake Ollama keeps the documented protocol: framing, timings, errors, compatibility layers."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import aiohttp
import ollama
import openai
import pytest
from pytest_aiohttp import AiohttpServer

from tests.support.fake_ollama import F32, FakeOllama, Script, go_json, host_allowed

_RFC3339NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post(
    session: aiohttp.ClientSession, url: str, body: Any, **kw: Any
) -> tuple[int, dict[str, str], bytes]:
    async with session.post(url, data=json.dumps(body), **kw) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def lines(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.split(b"\n") if line]


def parse_time(text: str) -> float:
    seconds, _, fraction = text.rstrip("Z").partition(".")
    base = datetime.fromisoformat(seconds + "+00:00").timestamp()
    return base + float("0." + (fraction or "0"))


def test_go_json_matches_go_bytes() -> None:
    assert go_json({"a": "<think>&", "b": [1, 2.5, None, True]}) == (
        b'{"a":"\\u003cthink\\u003e\\u0026","b":[1,2.5,null,true]}'
    )
    assert (
        go_json([1e-7, 2.3355835e-05, 1e21, 1.0, F32(0.1)]) == b"[1e-7,0.000023355835,1e+21,1,0.1]"
    )


def test_host_rule() -> None:
    for host in (
        "localhost:11434",
        "127.0.0.1",
        "[::1]:1",
        "10.1.2.3:80",
        "a.local",
        "x.internal",
        "",
    ):
        assert host_allowed(host), host
    for host in ("evil.example.com", "[::1]", "8.8.8.8:11434", "localhost.evil.com"):
        assert not host_allowed(host), host


async def test_headers_wait_for_the_first_chunk_and_durations_report_the_delays(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(
        load_delay=0.2, queue_delay=0.1, prefill_delay=0.1, token_delay=0.05
    )
    wall_start = time.time()
    start = time.monotonic()
    async with session.post(
        fake_ollama.url + "/api/generate", json={"model": "llama3.2", "prompt": "hi"}
    ) as resp:
        headers_after = time.monotonic() - start
        raw = await resp.read()
        assert resp.headers["Content-Type"] == "application/x-ndjson"
        assert resp.headers["Transfer-Encoding"] == "chunked"
    assert headers_after >= 0.39
    objects = lines(raw)
    final = objects[-1]
    assert [o["response"] for o in objects[:-1]] == ["The", " sky", " is", " blue", "."]
    assert all(set(o) == {"model", "created_at", "response", "done"} for o in objects[:-1])
    assert final["done"]
    assert final["done_reason"] == "stop"
    assert final["load_duration"] / 1e9 == pytest.approx(0.2, abs=0.05)
    assert final["prompt_eval_duration"] / 1e9 == pytest.approx(0.1, abs=0.05)
    assert final["eval_duration"] / 1e9 == pytest.approx(0.2, abs=0.06)
    assert final["total_duration"] / 1e9 == pytest.approx(0.6, abs=0.1)
    assert final["eval_count"] == 5
    assert final["prompt_eval_count"] == 26
    assert len(final["context"]) == 31
    assert all(_RFC3339NANO.match(o["created_at"]) for o in objects)
    server_start = parse_time(final["created_at"]) - final["total_duration"] / 1e9
    assert server_start == pytest.approx(wall_start, abs=0.05)
    server_ttft = parse_time(objects[0]["created_at"]) - server_start
    assert server_ttft == pytest.approx(0.4, abs=0.06)


async def test_lines_are_compact_go_json_with_nothing_in_between(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(thinking=["<think>"], tokens=["a&b", "<br>"])
    body = {"model": "qwen3:8b", "messages": CHAT}
    _, _, raw = await post(session, fake_ollama.url + "/api/chat", body)
    assert raw.endswith(b"\n")
    assert b"\n\n" not in raw
    assert b"\\u003cthink\\u003e" in raw
    assert b"a\\u0026b" in raw
    assert b"<" not in raw
    for line in raw.split(b"\n")[:-1]:
        assert line == go_json(json.loads(line))
    objects = lines(raw)
    assert objects[0]["message"] == {"role": "assistant", "content": "", "thinking": "<think>"}
    assert list(objects[-1]) == [
        "model", "created_at", "message", "done", "done_reason",
        "total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
        "eval_count", "eval_duration",
    ]  # fmt: skip


async def test_non_streaming_is_one_object(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(thinking=["hmm"])
    body = {"model": "qwen3:8b", "prompt": "hi", "stream": False}
    status, headers, raw = await post(session, fake_ollama.url + "/api/generate", body)
    assert status == 200
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert not raw.endswith(b"\n")
    reply = json.loads(raw)
    assert (reply["response"], reply["thinking"], reply["eval_count"]) == (
        "The sky is blue.",
        "hmm",
        6,
    )
    body = {"model": "qwen3:8b", "prompt": "hi", "stream": False, "think": False}
    reply = json.loads((await post(session, fake_ollama.url + "/api/generate", body))[2])
    assert "thinking" not in reply
    assert "context" in reply


async def test_official_python_client(fake_ollama: FakeOllama) -> None:
    client = ollama.AsyncClient(host=fake_ollama.url)
    parts = [p async for p in await client.chat("llama3.2", messages=CHAT, stream=True)]
    assert "".join(p.message.content or "" for p in parts) == "The sky is blue."
    assert parts[-1].done
    assert parts[-1].eval_count == 5
    reply = await client.generate("llama3.2", "hi")
    assert reply.response == "The sky is blue."
    assert reply.context
    fake_ollama.script = Script(
        tokens=[],
        tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}],
    )
    parts = [p async for p in await client.chat("llama3.2", messages=CHAT, stream=True)]
    call = parts[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, call.function.arguments) == ("get_weather", {"city": "Tokyo"})
    assert not parts[0].done
    assert parts[-1].done
    fake_ollama.script.tool_calls_on_final = True
    parts = [p async for p in await client.chat("llama3.2", messages=CHAT, stream=True)]
    assert len(parts) == 1
    assert parts[0].done
    assert parts[0].message.tool_calls
    embedded = await client.embed("all-minilm", ["Why is the sky blue?", "b"])
    assert len(embedded.embeddings) == 2
    assert len(embedded.embeddings[0]) == 384
    assert embedded.prompt_eval_count == 11
    assert sum(v * v for v in embedded.embeddings[0]) == pytest.approx(1.0, abs=1e-4)
    shown = await client.show("llama3.2")
    assert shown.modelinfo is not None
    assert shown.modelinfo["tokenizer.ggml.tokens"] is None
    assert [p.status async for p in await client.pull("new-model", stream=True)][-1] == "success"
    assert "new-model:latest" in [m.model for m in (await client.list()).models]


async def test_show_verbose_returns_full_arrays(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    _, headers, raw = await post(
        session, fake_ollama.url + "/api/show", {"model": "llama3.2", "verbose": True}
    )
    info = json.loads(raw)["model_info"]
    assert info["tokenizer.ggml.tokens"][1] == "The"
    assert list(info) == sorted(info)
    assert "Content-Length" in headers


async def test_load_and_unload(fake_ollama: FakeOllama, session: aiohttp.ClientSession) -> None:
    url = fake_ollama.url
    _, headers, raw = await post(session, url + "/api/generate", {"model": "llama3.2"})
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert json.loads(raw)["done_reason"] == "load"
    assert "total_duration" not in json.loads(raw)
    async with session.get(url + "/api/ps") as resp:
        assert [m["name"] for m in (await resp.json())["models"]] == ["llama3.2:latest"]
    body: dict[str, Any] = {"model": "llama3.2", "messages": [], "keep_alive": "0s"}
    reply = json.loads((await post(session, url + "/api/chat", body))[2])
    assert reply["done_reason"] == "unload"
    assert reply["message"]["content"] == ""
    assert fake_ollama.loaded == {}
    body = {"model": "llama3.2", "prompt": "x", "options": {"num_ctx": 8192}}
    await post(session, url + "/api/generate", body)
    assert fake_ollama.loaded["llama3.2:latest"].context_length == 8192


async def test_unlisted_models_are_served_but_not_listed(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    url = fake_ollama.url
    fake_ollama.unlisted.add("qwen3:8b")
    async with session.get(url + "/api/tags") as resp:
        assert "qwen3:8b" not in [m["name"] for m in (await resp.json())["models"]]
    async with session.get(url + "/v1/models") as resp:
        assert "qwen3:8b" not in [m["id"] for m in (await resp.json())["data"]]
    body = {"model": "qwen3:8b", "prompt": "x", "stream": False}
    assert (await post(session, url + "/api/generate", body))[0] == 200
    body = {"model": "qwen3:8b", "messages": CHAT}
    assert (await post(session, url + "/v1/chat/completions", body))[0] == 200
    for route in ("/api/generate", "/v1/chat/completions", "/api/show", "/api/embed"):
        status = (await post(session, url + route, {"model": "never-pulled", "input": "x"}))[0]
        assert status == 404, route


async def test_error_shapes(fake_ollama: FakeOllama, session: aiohttp.ClientSession) -> None:
    url = fake_ollama.url
    status, _, raw = await post(session, url + "/api/chat", {"model": "nope", "messages": CHAT})
    assert (status, json.loads(raw)) == (404, {"error": "model 'nope' not found"})
    status, _, raw = await post(session, url + "/api/embed", {"model": "nope", "input": "x"})
    assert json.loads(raw) == {"error": 'model "nope" not found, try pulling it first'}
    fake_ollama.script = Script(status_error=(500, "model runner has unexpectedly stopped"))
    status, headers, raw = await post(
        session, url + "/api/generate", {"model": "llama3.2", "prompt": "x"}
    )
    assert (status, headers["Content-Type"]) == (500, "application/json")
    assert json.loads(raw)["error"].startswith("model runner")
    fake_ollama.script = Script(error_after=2)
    status, _, raw = await post(
        session, url + "/api/generate", {"model": "llama3.2", "prompt": "x"}
    )
    assert status == 200
    assert lines(raw)[2:] == [{"error": "an error was encountered while running the model"}]
    client = ollama.AsyncClient(host=url)
    with pytest.raises(ollama.ResponseError, match="an error was encountered"):
        async for _ in await client.generate("llama3.2", "hi", stream=True):
            pass
    fake_ollama.script = Script(no_final=True)
    _, _, raw = await post(session, url + "/api/generate", {"model": "llama3.2", "prompt": "x"})
    assert not any(o["done"] for o in lines(raw))
    fake_ollama.script = Script(die_after=2)
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(session, url + "/api/generate", {"model": "llama3.2", "prompt": "x"})
    async with session.get(url + "/api/nothing") as resp:
        assert (resp.status, await resp.text()) == (404, "404 page not found")
    async with session.put(url + "/api/generate") as resp:
        assert (resp.status, await resp.text()) == (405, "405 method not allowed")


async def test_zero_fields_are_omitted_and_cached_count_is_reported(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(zero_fields=("load_duration",), prompt_eval_cached_count=20)
    _, _, raw = await post(
        session,
        fake_ollama.url + "/api/generate",
        {"model": "llama3.2", "prompt": "x", "raw": True},
    )
    final = lines(raw)[-1]
    assert "load_duration" not in final
    assert "context" not in final
    assert final["prompt_eval_cached_count"] == 20


async def test_blobs_and_the_early_answer(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    data = bytes(range(256)) * 4096
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blob_url = f"{fake_ollama.url}/api/blobs/{digest}"
    async with session.post(blob_url, data=data) as resp:
        assert resp.status == 201
    assert fake_ollama.blobs[digest] == data
    async with session.post(blob_url, data=data) as resp:
        assert (resp.status, resp.headers.get("Connection")) == (200, "close")
    assert len(fake_ollama.received[-1].body) < len(data)
    async with session.post(f"{fake_ollama.url}/api/blobs/sha256:{'0' * 64}", data=b"x") as resp:
        message = (await resp.json())["error"]
    assert resp.status == 400
    assert message.startswith("digest mismatch, expected")
    async with session.head(f"{fake_ollama.url}/api/blobs/sha256:{'1' * 64}") as resp:
        assert resp.status == 404
    async with session.head(blob_url) as resp:
        assert resp.status == 200


async def test_host_and_origin_checks(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    async with session.get(fake_ollama.url + "/", headers={"Host": "evil.example.com"}) as resp:
        assert (resp.status, await resp.read()) == (403, b"")
    async with session.get(
        fake_ollama.url + "/", headers={"Origin": "https://evil.example.com"}
    ) as resp:
        assert (resp.status, await resp.read()) == (403, b"")
    async with session.get(
        fake_ollama.url + "/", headers={"Origin": "http://localhost:3000"}
    ) as resp:
        assert resp.status == 200
    server = await aiohttp_server(FakeOllama(loopback_host_check=False).app())
    async with session.get(server.make_url("/"), headers={"Host": "evil.example.com"}) as resp:
        assert (resp.status, await resp.text()) == (200, "Ollama is running")
    got = fake_ollama.received[0]
    assert ("Host", "evil.example.com") in got.headers
    assert got.method == "GET"


async def test_openai_chat_and_completions(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    client = openai.AsyncOpenAI(base_url=fake_ollama.url + "/v1", api_key="x")
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model="llama3.2",
        messages=CHAT,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "The sky is blue."
    )
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 31
    reply = await client.chat.completions.create(model="llama3.2", messages=CHAT)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "The sky is blue."
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=CHAT)  # type: ignore[arg-type]
    body = {
        "model": "llama3.2",
        "prompt": "hi",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    _, headers, raw = await post(session, fake_ollama.url + "/v1/completions", body)
    events = raw.decode().split("\n\n")
    assert headers["Content-Type"] == "text/event-stream"
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(p["usage"]["total_tokens"] == 0 for p in payloads[:-1])
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"]["completion_tokens"] == 5
    embedded = await client.embeddings.create(model="all-minilm", input=["a", "b"])
    assert len(embedded.data) == 2
    assert len(embedded.data[0].embedding) == 384
    assert "llama3.2:latest" in [m.id async for m in client.models.list()]


async def test_openai_mid_stream_error_drops_done(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(error_after=1)
    body = {"model": "llama3.2", "messages": CHAT, "stream": True}
    _, _, raw = await post(session, fake_ollama.url + "/v1/chat/completions", body)
    last = json.loads(raw.decode().split("\n\n")[-2].removeprefix("data: "))
    assert last["model"] == ""
    assert b"[DONE]" not in raw


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    frames = [f for f in raw.decode().split("\n\n") if f]
    result = []
    for frame in frames:
        kind, data = frame.split("\n")
        result.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return result


async def test_responses_and_messages_streams(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(thinking=["hm"])
    body = {"model": "qwen3:8b", "input": "hi", "stream": True}
    _, _, raw = await post(session, fake_ollama.url + "/v1/responses", body)
    events = sse_events(raw)
    assert [e[1]["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0][0] == "response.created"
    assert events[-1][0] == "response.completed"
    assert events[-1][1]["response"]["usage"]["output_tokens"] == 6
    body = {"model": "qwen3:8b", "max_tokens": 9, "messages": CHAT, "stream": True}
    _, headers, raw = await post(session, fake_ollama.url + "/v1/messages", body)
    events = sse_events(raw)
    assert headers["Cache-Control"] == "no-cache"
    assert [e[0] for e in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2][1]["usage"] == {"input_tokens": 26, "output_tokens": 6}
    assert events[1][1]["content_block"]["type"] == "thinking"
    status, _, raw = await post(session, fake_ollama.url + "/v1/messages", {"model": "qwen3:8b"})
    assert status == 400
    assert json.loads(raw)["type"] == "error"

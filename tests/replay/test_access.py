"""`replay serve` reads recordings out to the token holder only, and bounds what it reads."""

from __future__ import annotations

import asyncio

import aiohttp
import ollama
import orjson
import pytest

from ollama_tap.replay.access import MAX_BODY, READERS
from ollama_tap.replay.matching import MatchMode
from tests.conftest import Proxy
from tests.replay.conftest import StartReplay
from tests.support.records import records
from tests.support.waiting import eventually

TOKEN = "replay-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def test_nearest_gives_nothing_without_the_token(
    proxy: Proxy, replay_of: StartReplay
) -> None:
    """With --match nearest any request got a recording, `context` ids and all, and
    /api/tags listed every recorded model, to anyone who could connect."""
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "a secret prompt")
    replay = await replay_of(proxy, 1, mode=MatchMode.NEAREST, token=TOKEN)
    anything = {"model": "anything", "prompt": "x", "stream": False}
    async with aiohttp.ClientSession() as s:
        for method, path, headers in (
            ("POST", "/api/generate", {}),
            ("GET", "/api/tags", {}),
            ("POST", "/v1/chat/completions", {"Authorization": "Bearer wrong-token-guess"}),
        ):
            async with s.request(method, replay.url + path, json=anything, headers=headers) as r:
                assert r.status == 401
                body = await r.json()
                error = body["error"] if path.startswith("/api") else body["error"]["message"]
                assert "Authorization: Bearer" in error and "admin-token" in error
        async with s.get(replay.url + "/api/version") as resp:
            assert resp.status == 200  # reveals nothing: Ollama's clients check it first
        async with s.post(replay.url + "/api/generate", json=anything, headers=BEARER) as r:
            assert r.status == 200 and (await r.json())["context"]


async def test_a_body_past_the_bound_is_refused_in_ollamas_shape(
    proxy: Proxy, replay_of: StartReplay
) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    replay = await replay_of(proxy, 1, token=TOKEN)
    too_large = b'{"model": "llama3.2", "prompt": "' + b"x" * MAX_BODY + b'"}'
    async with aiohttp.ClientSession() as s:
        async with s.post(replay.url + "/api/generate", data=too_large, headers=BEARER) as r:
            assert r.status == 413
            assert "MiB" in (await r.json())["error"]

        async def chunks() -> object:  # no Content-Length: refused once the bytes pass it
            for _ in range(MAX_BODY // 2**20 + 1):
                yield b"x" * 2**20

        async with s.post(replay.url + "/api/show", data=chunks(), headers=BEARER) as r:
            assert r.status == 413


async def test_bodies_are_read_a_few_at_a_time(proxy: Proxy, replay_of: StartReplay) -> None:
    """Six 200 MiB bodies read at once took the server to 1.47 GiB: now READERS are read at
    a time, and the others wait with their bytes unread."""
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    replay = await replay_of(proxy, 1, token=TOKEN)
    readers = replay.replayer.readers
    host, port = replay.url.removeprefix("http://").split(":")
    streams = []
    for _ in range(READERS + 2):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        streams.append((reader, writer))
    await eventually(lambda: readers.reading == READERS)
    await asyncio.sleep(0.3)
    assert readers.reading == READERS
    for _, writer in streams:
        writer.write(b" " * 998 + b"}")
    for reader, writer in streams:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 404")  # `{ }` matches no recording
        writer.close()
    assert readers.reading == 0


@pytest.mark.parametrize("given", [None, "wrong-token-guess-000"])
async def test_show_needs_the_token_too(
    proxy: Proxy, replay_of: StartReplay, given: str | None
) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    replay = await replay_of(proxy, 1, token=TOKEN)
    headers = {} if given is None else {"Authorization": f"Bearer {given}"}
    async with aiohttp.ClientSession() as s:
        body = orjson.dumps({"model": "llama3.2"})
        async with s.post(replay.url + "/api/show", data=body, headers=headers) as resp:
            assert resp.status == 401
        async with s.post(replay.url + "/api/show", data=body, headers=BEARER) as resp:
            assert resp.status in {200, 404}

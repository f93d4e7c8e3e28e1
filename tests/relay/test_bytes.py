"""Byte-exactness under random chunking, huge lines and binary bodies (property-based)."""

from __future__ import annotations

import asyncio
import hashlib
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ollama_tap.exchange import Outcome
from tests.conftest import MakeProxy, Proxy
from tests.support.spy import Spy

CONTENT_TYPES = ["application/x-ndjson", "text/event-stream", "application/octet-stream"]


class ScriptedUpstream:
    """Writes exactly the pieces it is told to, and keeps what it received."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.content_type = "application/x-ndjson"
        self.received = b""
        self.piece_times: list[float] = []

    async def reply(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":  # the proxy's poller, not the test's traffic
            return web.Response(status=404)
        chunks = []
        async for data in request.content.iter_any():
            self.piece_times.append(asyncio.get_running_loop().time())
            chunks.append(data)
        self.received = b"".join(chunks)
        resp = web.StreamResponse(headers={"Content-Type": self.content_type})
        await resp.prepare(request)
        for piece in self.pieces:
            await resp.write(piece)
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 40)
        app.router.add_route("*", "/{tail:.*}", self.reply)
        return app


@pytest.fixture
async def scripted(
    aiohttp_server: Callable[..., Awaitable[TestServer]], proxy_factory: MakeProxy
) -> AsyncIterator[tuple[ScriptedUpstream, Proxy]]:
    up = ScriptedUpstream()
    server = await aiohttp_server(up.app())
    proxy = await proxy_factory(upstream=str(server.make_url("")).rstrip("/"))
    return up, proxy


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=3000), min_size=0, max_size=30),
    content_type=st.sampled_from(CONTENT_TYPES),
    body=st.binary(max_size=5000),
)
async def test_random_chunking_is_relayed_byte_exact(
    scripted: tuple[ScriptedUpstream, Proxy], pieces: list[bytes], content_type: str, body: bytes
) -> None:
    up, proxy = scripted
    up.pieces, up.content_type = pieces, content_type
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        async with s.post(proxy.url + "/api/generate", data=body) as resp:
            got = await resp.read()
    assert got == b"".join(pieces)
    assert up.received == body


async def test_lines_of_several_megabytes(scripted: tuple[ScriptedUpstream, Proxy]) -> None:
    up, proxy = scripted
    big = b'{"model":"m","response":"' + b"x" * (6 << 20) + b'","done":false}\n'
    final = b'{"model":"m","done":true,"eval_count":1}\n'
    up.pieces = [big[i : i + 70_000] for i in range(0, len(big), 70_000)] + [final]
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/api/generate", data=b"{}") as r,
    ):
        assert await r.read() == big + final


async def test_a_line_past_the_cap_is_relayed_whole_but_never_held_whole(
    aiohttp_server: Callable[..., Awaitable[TestServer]], proxy_factory: MakeProxy
) -> None:
    """A 24 MiB reply line reaches the client byte for byte; the reader gives it up at its
    cap (MAX_LINE, 8 MiB) instead of holding it, and copying it, whole."""
    up = ScriptedUpstream()
    server = await aiohttp_server(up.app())
    ends = Spy()
    url = str(server.make_url("")).rstrip("/")
    proxy = await proxy_factory(upstream=url, observers=(ends,))
    big = b'{"model":"m","response":"' + b"x" * (24 << 20) + b'","done":false}\n'
    final = b'{"model":"m","done":true,"eval_count":1}\n'
    up.pieces = [big[i : i + 65536] for i in range(0, len(big), 65536)] + [final]
    digest = hashlib.sha256()
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(proxy.url + "/api/generate", data=b"{}") as r:
                async for data in r.content.iter_any():
                    digest.update(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert digest.digest() == hashlib.sha256(big + final).digest()
    assert peak < 20 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    (ex,) = await ends.wait_ended()
    assert ex.outcome is Outcome.OK and "not read" in (ex.error_message or "")


async def test_request_body_streams_upstream_before_the_upload_ends(
    scripted: tuple[ScriptedUpstream, Proxy],
) -> None:
    up, proxy = scripted
    sent_second_at: list[float] = []

    async def trickle() -> AsyncIterator[bytes]:
        yield b"a" * 1000
        await asyncio.sleep(0.5)
        sent_second_at.append(asyncio.get_running_loop().time())
        yield b"b" * 1000

    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/blobs/sha256:" + "1" * 64, data=trickle()) as r:
            await r.read()
    assert up.received == b"a" * 1000 + b"b" * 1000
    assert up.piece_times[0] < sent_second_at[0], "the proxy held the body back"


async def test_large_binary_upload_passes(scripted: tuple[ScriptedUpstream, Proxy]) -> None:
    up, proxy = scripted
    block = bytes(range(256)) * 4096  # 1 MiB

    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield block

    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/blobs/sha256:" + "2" * 64, data=body()) as r:
            assert r.status == 200
    assert len(up.received) == 64 * len(block)


class CountingSink:
    """An upstream that counts the bytes of an upload and keeps none of them."""

    def __init__(self) -> None:
        self.count = 0

    async def sink(self, request: web.Request) -> web.Response:
        async for data in request.content.iter_any():
            self.count += len(data)
        return web.Response(status=201)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/blobs/{digest}", self.sink)
        return app


async def test_a_big_upload_passes_at_constant_memory(
    aiohttp_server: Callable[..., Awaitable[TestServer]], proxy_factory: MakeProxy
) -> None:
    sink = CountingSink()
    server = await aiohttp_server(sink.app())
    proxy = await proxy_factory(upstream=str(server.make_url("")).rstrip("/"))
    block = b"\x00\x01" * (512 * 1024)  # 1 MiB, the same object every time
    total = 256

    async def body() -> AsyncIterator[bytes]:
        for _ in range(total):
            yield block

    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(proxy.url + "/api/blobs/sha256:" + "3" * 64, data=body()) as r:
                assert r.status == 201
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.count == total * len(block)
    # 256 MiB went through; what the process (client, proxy and sink together) held at
    # once stayed a small multiple of the socket buffers.
    assert peak < 24 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"

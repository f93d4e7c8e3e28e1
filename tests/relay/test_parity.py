"""Transparency: every route reaches Ollama as the client sent it and comes back as Ollama
answered, the hooks report it, and what upstreams do at the edges of HTTP/1.1 is handled."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from ollama_tap.exchange import Exchange, Outcome, OutputChunk
from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.relaying import (
    MARK,
    RawHandler,
    Recorder,
    answered_then_dropped,
    read_head,
)
from tests.support.transparency import ROUTES, comparable, fetch


async def through(
    proxy_factory: MakeProxy,
    method: str,
    path: str,
    body: Any,
    *,
    warm: bool = False,
    chunked: bool = False,
    on_arrival: list[bool] | None = None,
    **kw: Any,
) -> tuple[Recorder, tuple[int, list[tuple[str, str]], bytes]]:
    """One request through a new proxy; `warm`: after another one, so that an idle pooled
    connection waits (the front then sends a request that arrived whole on arrival).
    `on_arrival` is told whether the front sent this one on arrival (it logs that at debug
    level)."""
    recorder = Recorder()
    proxy = await proxy_factory(observers=(recorder,), log_level="debug", **kw)
    if warm:
        async with aiohttp.ClientSession() as s:
            await fetch(s, "GET", proxy.url + "/api/version", None)
        recorder.calls.clear()
    with capture_logs() as logs:
        async with aiohttp.ClientSession(auto_decompress=False, headers=MARK) as s:
            got = await fetch(s, method, proxy.url + path, body, chunked=chunked)
    if on_arrival is not None:
        on_arrival.append(any(e["event"] == "sent_on_arrival" for e in logs))
    return recorder, (got[0], comparable(got[1]), got[2])


_FRAMING = ("Content-Length", "Transfer-Encoding")


def _sent(
    fake_ollama: FakeOllama, before: int, *, reframed: bool = False
) -> list[tuple[str, list[tuple[str, str]], Any]]:
    """The test's requests the fake received since `before` (its poller's are not); without
    their framing when `reframed` (a chunked body that arrived whole goes with its length)."""
    sent = [r for r in fake_ollama.received[before:] if (*MARK.items(),)[0] in r.headers]
    return [
        (r.method, sorted(h for h in r.headers if not (reframed and h[0] in _FRAMING)), r.body)
        for r in sent
    ]


_FRAMED = [
    (*route, chunked) for route in ROUTES for chunked in (False, True) if route[2] or not chunked
]


@pytest.mark.parametrize(
    ("method", "path", "body", "chunked"),
    _FRAMED,
    ids=[f"{m} {p}{' chunked' if c else ''}" for m, p, _, c in _FRAMED],
)
async def test_every_route_reaches_ollama_and_comes_back_as_if_sent_straight(
    method: str,
    path: str,
    body: Any,
    chunked: bool,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
) -> None:
    """Upstream, the request is the one the client would have sent straight to Ollama (Host
    is the upstream's either way), its body with a length or chunked; back, the status and
    headers are Ollama's. The hooks and both sides are the same whether the request waited
    for a connection or went upstream the moment it arrived whole."""
    before = len(fake_ollama.received)
    async with aiohttp.ClientSession(auto_decompress=False, headers=MARK) as s:
        direct = await fetch(s, method, fake_ollama.url + path, body, chunked=chunked)
    straight = (_sent(fake_ollama, before, reframed=chunked), (direct[0], comparable(direct[1])))
    on_arrival: list[bool] = []
    seen = {}
    for warm in (False, True):
        before = len(fake_ollama.received)
        recorder, reply = await through(
            proxy_factory, method, path, body, warm=warm, chunked=chunked, on_arrival=on_arrival
        )
        seen[warm] = (recorder.calls, reply[:2], _sent(fake_ollama, before, reframed=chunked))
        assert (seen[warm][2], seen[warm][1]) == straight
    assert seen[False] == seen[True]
    if not chunked:  # a chunked body comes in pieces: not whole on arrival
        assert on_arrival == [False, True], "the warm request was not sent on arrival"
    hooks = [name for name, _ in seen[False][0]]
    assert hooks[:2] == ["request", "response_headers"] and hooks[-1] == "response"


@pytest.mark.parametrize(
    ("script", "outcome"),
    [
        (Script(error_after=2), Outcome.STREAM_ERROR),
        (Script(no_final=True), Outcome.INCOMPLETE),
        (Script(), Outcome.OK),
    ],
)
async def test_stream_outcomes(
    script: Script, outcome: Outcome, proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = script
    body = {"model": "llama3.2", "prompt": "hi"}
    calls = (await through(proxy_factory, "POST", "/api/generate", body))[0].calls
    assert [name for name, _ in calls[:2]] == ["request", "response_headers"]
    assert calls[-1][0] == "response" and calls[-1][1][6] is outcome


# -- an upstream written by hand, for what aiohttp's server will not do -----------------------


async def test_a_trailer_never_becomes_a_header(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(  # head, body and trailer in one write: one read at the proxy
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"3\r\n{}\n\r\n0\r\nX-Trailer: late\r\nContent-Type: text/html\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    spy = Recorder()
    proxy = await proxy_factory(upstream=await raw_upstream(serve), observers=(spy,))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/x") as resp:
        assert await resp.read() == b"{}\n"
        assert "X-Trailer" not in resp.headers
        assert resp.headers["Content-Type"] == "application/x-ndjson"


async def test_a_reply_framed_by_the_close_is_relayed_whole(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        for i in range(5):
            writer.write(b"line %d\n" % i)
            await writer.drain()
        writer.close()

    spy = Recorder()
    proxy = await proxy_factory(upstream=await raw_upstream(serve), observers=(spy,))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/x") as resp:
        assert await resp.read() == b"".join(b"line %d\n" % i for i in range(5))
    assert spy.calls[-1][1][6] == Outcome.OK


@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("POST", False)])
async def test_a_pooled_connection_dead_before_answering_is_retried_if_idempotent(
    method: str,
    retried: bool,
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
) -> None:
    connections: set[int] = set()
    serve = answered_then_dropped(connections)
    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(headers=MARK) as s:
        async with s.request(method, proxy.url + "/x") as resp:
            assert await resp.read() == b"ok"
        async with s.request(method, proxy.url + "/x") as resp:
            assert resp.status == (200 if retried else 502)
    assert len(connections) == (2 if retried else 1)


async def test_a_slow_client_holds_the_upstream_back(
    aiohttp_server: Callable[..., Awaitable[TestServer]], proxy_factory: MakeProxy
) -> None:
    piece, total = b"x" * 65536, 512 * 65536  # 32 MiB
    written = 0

    async def big(request: web.Request) -> web.StreamResponse:
        nonlocal written
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        while written < total:
            await resp.write(piece)
            written += len(piece)
        return resp

    app = web.Application()
    app.router.add_get("/big", big)
    server = await aiohttp_server(app)
    proxy = await proxy_factory(upstream=str(server.make_url("")).rstrip("/"))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/big") as resp:
        await asyncio.sleep(0.5)
        # Socket buffers on the way hold a few MiB; without back-pressure it would be all.
        assert written < total // 2
        assert len(await resp.read()) == total


async def test_read_timeout_before_and_during_the_reply(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        if b"/late" not in head:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n")
            writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
            writer.write(b'1d\r\n{"model":"m","response":"a"}\n\r\n')
        await asyncio.sleep(2)
        writer.close()

    spy = Recorder()
    proxy = await proxy_factory(
        upstream=await raw_upstream(serve), read_timeout=0.2, observers=(spy,)
    )
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", json={"model": "m"}) as resp:
            assert await resp.content.readline() == b'{"model":"m","response":"a"}\n'
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        async with s.post(proxy.url + "/late", json={"model": "m"}) as resp:
            assert resp.status == 504
    outcomes = [call[1][6] for call in spy.calls if call[0] in ("response", "error")]
    assert outcomes == [Outcome.INCOMPLETE, Outcome.UPSTREAM_UNREACHABLE]


async def test_a_cut_after_the_streams_end_keeps_what_the_stream_said(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # The upstream closes without the last chunk, after the final object (the client got
    # every line: ok), after an error line (stream_error), or before either (incomplete).
    ends = {
        b"=final": b'{"model":"m","done":true,"done_reason":"stop","eval_count":1}\n',
        b"=error": b'{"error":"runner died"}\n',
        b"=none": b"",
    }

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        end = next(v for k, v in ends.items() if k in head.split(b"\r\n")[0])
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n")
        writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
        for line in (b'{"model":"m","response":"a","done":false}\n', end):
            if line:
                writer.write(b"%x\r\n%b\r\n" % (len(line), line))
        await writer.drain()
        writer.close()

    spy = Recorder()
    proxy = await proxy_factory(upstream=await raw_upstream(serve), observers=(spy,))
    async with aiohttp.ClientSession() as s:
        for case in ("final", "error", "none"):
            async with s.post(proxy.url + "/api/generate?end=" + case, json={}) as resp:
                with pytest.raises(aiohttp.ClientPayloadError):  # cut, as it was upstream
                    await resp.read()
    for _ in range(100):
        if len([c for c in spy.calls if c[0] in ("response", "error")]) == 3:
            break
        await asyncio.sleep(0.01)
    outcomes = [call[1][6] for call in spy.calls if call[0] in ("response", "error")]
    assert outcomes == [Outcome.OK, Outcome.STREAM_ERROR, Outcome.INCOMPLETE]


@pytest.mark.interpreted
async def test_duration_ends_at_the_last_write_not_after_the_replys_parse(
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A single reply is parsed when it ends (an 8 MiB embedding takes tens of ms); made
    # to take 80 ms here, the parse must not count in the client's request duration.
    from ollama_tap.ollama import readers

    parse = readers._ReplyReader.close

    def slow(self: Any, at: float) -> list[OutputChunk]:
        time.sleep(0.08)
        return parse(self, at)

    monkeypatch.setattr(readers._ReplyReader, "close", slow)
    body = b'{"model":"m","embeddings":[[0.5]],"total_duration":5,"load_duration":1}'

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        await writer.drain()

    class Clock:
        name = "clock"

        def __init__(self) -> None:
            self.ended: list[tuple[Exchange, float]] = []

        def response(self, ex: Exchange) -> None:
            self.ended.append((ex, time.monotonic()))

    clock = Clock()
    proxy = await proxy_factory(upstream=await raw_upstream(serve), observers=(clock,))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/embed", json={"model": "m", "input": "x"}) as resp:
            assert await resp.read() == body
    for _ in range(100):
        if clock.ended:
            break
        await asyncio.sleep(0.01)
    [(ex, heard)] = clock.ended
    assert ex.final is not None and ex.usage is not None  # parsed, after the stamp
    assert ex.ended is not None and heard - ex.ended >= 0.08


async def test_a_length_less_reply_to_a_keep_alive_http_1_0_client_ends_with_the_connection(
    proxy_factory: MakeProxy,
) -> None:
    # HTTP/1.0 has no chunking: a stream's end is the connection's close (RFC 9112 §6.3),
    # whatever keep-alive the client asked for; kept open, the client would wait forever.
    proxy = await proxy_factory()
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    body = b'{"model":"llama3.2","prompt":"hi"}'
    writer.write(
        b"POST /api/generate HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    reply = await asyncio.wait_for(reader.read(), 5)  # to EOF: the proxy closed
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    assert b"content-length" not in head.lower() and b"keep-alive" not in head.lower()
    assert orjson.loads(rest.splitlines()[-1])["done"] is True
    writer.close()


async def test_an_upstream_that_answers_garbage_is_not_called_unreachable(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # Something listens and answers, but not with HTTP (a crashed runner's port reused,
    # the wrong service): the 502 says so, instead of "start Ollama".
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\nnot http at all\r\n\r\n")
        await writer.drain()
        writer.close()

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", json={"model": "m"}) as resp:
            assert resp.status == 502
            message = (await resp.json())["error"]
    assert message.startswith("ollama-tap: Ollama at http://127.0.0.1:")
    assert "broke off the exchange without a valid reply" in message
    assert "\n" not in message and "start Ollama" not in message


async def test_expect_continue_and_names_repeated_in_another_case_reach_an_upstream(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # The upstream never sends 100 Continue (RFC 9110 lets it ignore Expect): the proxy
    # answered the client's expectation itself, so the body must come without waiting for
    # one. Header lines whose names differ only in case all arrive, values in order.
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
        heads.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: 2\r\n\r\n{}")
        await writer.drain()

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    body = b'{"model":"m"}'
    writer.write(
        b"POST /api/show HTTP/1.1\r\nHost: localhost\r\nX-Dup: 1\r\nx-dup: 2\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == (
        b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    writer.write(body)
    reply = await asyncio.wait_for(reader.readuntil(b"{}"), 5)
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    writer.close()
    [sent] = heads
    assert sent.endswith(body)
    assert re.findall(rb"(?i)x-dup: (\d)", sent) == [b"1", b"2"]


async def test_a_long_reply_header_is_relayed(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # 20,000 bytes: past aiohttp's client default (8,190), within what the proxy's server
    # takes from clients (64 KiB).
    long = b"v" * 20_000

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Long: %b\r\nContent-Length: 2\r\n\r\n{}" % long)
        await writer.drain()

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(max_field_size=65536) as s:
        async with s.get(proxy.url + "/api/tags") as resp:
            assert (resp.status, resp.headers["X-Long"]) == (200, long.decode())


async def test_an_upstream_path_prefix_is_kept_and_the_target_sent_as_is(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    """OLLAMA_HOST may carry a path (Ollama behind a path-routing proxy): it goes before the
    client's target, and the target keeps its exact encoding (`//`, dot segments, `%2F`)."""
    lines: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await read_head(reader):
            if b"X-Test: prefix" in head:  # not the proxy's own pollers
                lines.append(head.split(b"\r\n", 1)[0])
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    upstream = await raw_upstream(serve) + "/ollama/"
    proxy = await proxy_factory(upstream=upstream)
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    for target in ("/api/tags", "//api/tags", "/api/../api/tags?x=%2F&y=a+b"):
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: localhost:11435\r\nX-Test: prefix\r\n\r\n".encode()
        )
        assert (await read_head(reader)).startswith(b"HTTP/1.1 200")
        assert await reader.readexactly(2) == b"{}"
    writer.close()
    assert lines == [
        b"GET /ollama/api/tags HTTP/1.1",
        b"GET /ollama//api/tags HTTP/1.1",
        b"GET /ollama/api/../api/tags?x=%2F&y=a+b HTTP/1.1",
    ]

"""The HTTP/1 transport (setting `relay = "fast"`): same exchange as the aiohttp transport,
plus the mechanics it implements itself (pool, framing, back-pressure, timeouts, TLS)."""

from __future__ import annotations

import asyncio
import gc
import re
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from proxy.exchange import Exchange, Outcome, OutputChunk
from proxy.relay import FRONT
from proxy.relay.aiohttp_relay import AiohttpRelay
from proxy.relay.http1.pool import UpstreamConnection
from proxy.relay.http1.relay import Http1Relay
from proxy.relay.http1.reply import Reply
from proxy.relay.http1.server import FrontConnection
from proxy.relay.tap import Relay, Tap, Tapped
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.transparency import ROUTES, comparable, fetch

RELAYS = ["aiohttp", "fast"]
_MARK = {"X-Test": "relay-comparison"}
_TIMES = ("response_started", "first_output", "first_content", "last_output", "ended")

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Recorder:
    """An observer that writes down every hook call and what the exchange held then."""

    name = "hook-recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def request(self, ex: Exchange) -> None:
        self.calls.append(("request", (ex.request, ex.request_body, ex.request_bytes)))

    def response_headers(self, ex: Exchange) -> None:
        headers = comparable(list(ex.response_headers.items()))
        self.calls.append(("response_headers", (ex.status, headers, ex.streamed)))

    def chunk(self, ex: Exchange, piece: OutputChunk) -> None:
        self.calls.append(("chunk", (piece.kind, piece.text)))

    def response(self, ex: Exchange) -> None:
        self.calls.append(("response", snapshot(ex)))

    def error(self, ex: Exchange) -> None:
        self.calls.append(("error", snapshot(ex)))


def snapshot(ex: Exchange) -> tuple[Any, ...]:
    """What must not depend on the relay; clock-bound values only as present or not."""
    usage = ex.usage and (ex.usage.prompt_eval_count, ex.usage.eval_count)
    times = tuple(getattr(ex, name) is None for name in _TIMES)
    return (
        ex.method, ex.path, ex.query, ex.endpoint, ex.status, ex.content_type, ex.outcome,
        ex.output_events, ex.done_reason, ex.error_message, usage, times,
    )  # fmt: skip


async def through(
    proxy_factory: MakeProxy,
    relay: str,
    method: str,
    path: str,
    body: Any,
    *,
    warm: bool = False,
    on_arrival: list[bool] | None = None,
    **kw: Any,
) -> tuple[Recorder, tuple[int, list[tuple[str, str]], bytes]]:
    """One request through a new proxy; `warm`: after another one, so that an idle pooled
    connection waits (the front then sends a request that arrived whole on arrival).
    `on_arrival` is told whether the front sent this one on arrival."""
    recorder = Recorder()
    proxy = await proxy_factory(relay=relay, observers=(recorder,), **kw)
    if warm:
        async with aiohttp.ClientSession() as s:
            await fetch(s, "GET", proxy.url + "/api/version", None)
        recorder.calls.clear()
    with capture_logs() as logs:
        async with aiohttp.ClientSession(auto_decompress=False, headers=_MARK) as s:
            got = await fetch(s, method, proxy.url + path, body)
    if on_arrival is not None:
        on_arrival.append(any(e["event"] == "sent_on_arrival" for e in logs))
    return recorder, (got[0], comparable(got[1]), got[2])


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_both_relays_send_the_same_and_report_the_same(
    method: str,
    path: str,
    body: Any,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
) -> None:
    """Byte for byte upstream, in hooks and on the wire back: the aiohttp relay, the fast
    relay, and the fast relay's front sending a request the moment it arrived whole."""
    on_arrival: list[bool] = []
    seen = {}
    for relay, warm in [*((r, False) for r in RELAYS), ("fast", True)]:
        before = len(fake_ollama.received)
        recorder, reply = await through(
            proxy_factory, relay, method, path, body, warm=warm, on_arrival=on_arrival
        )
        # The proxy's poller also talks to the fake; only the test's request counts.
        sent = [r for r in fake_ollama.received[before:] if (*_MARK.items(),)[0] in r.headers]
        upstream = [(r.method, r.headers, r.body) for r in sent]
        seen[relay, warm] = (recorder.calls, reply[:2], upstream)
    assert seen["fast", False] == seen["aiohttp", False]
    assert seen["fast", True] == seen["aiohttp", False]
    assert on_arrival[-1], "the last request was not sent on arrival"


@pytest.mark.parametrize("script", [Script(error_after=2), Script(no_final=True), Script()])
async def test_both_relays_agree_on_stream_outcomes(
    script: Script, proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = script
    body = {"model": "llama3.2", "prompt": "hi"}
    calls = [
        (await through(proxy_factory, relay, "POST", "/api/generate", body))[0].calls
        for relay in RELAYS
    ]
    assert calls[0] == calls[1]


# -- an upstream written by hand, for what aiohttp's server will not do -----------------------


@pytest.fixture
async def raw_upstream() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def _answered_then_dropped(connections: set[int] | None = None) -> RawHandler:
    """An upstream that answers the first marked (X-Test) request of each connection and
    drops the connection at the next one, the race a keep-alive timeout causes: the proxy's
    reused connection dies before answering. The poller's reads get a 404; `connections`
    collects the client ports of the marked requests."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        while head := await read_head(reader):
            if b"X-Test" not in head:  # the proxy's poller
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            if connections is not None:
                connections.add(writer.get_extra_info("peername")[1])
            if answered:
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            answered = True

    return serve


async def test_connections_are_reused_one_request_at_a_time(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    peers: set[int] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await read_head(reader):
            if b"X-Test" in head:
                peers.add(writer.get_extra_info("peername")[1])
            if b"HEAD " in head:
                # A length and no body: the connection must still be usable afterwards.
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

    proxy = await proxy_factory(relay="fast", upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(headers=_MARK) as s:
        for method in ["GET", "HEAD", "GET", "HEAD", "GET"] * 4:
            async with s.request(method, proxy.url + "/x") as resp:
                assert resp.headers["Content-Length"] == "5"
                assert await resp.read() == (b"" if method == "HEAD" else b"hello")
    assert len(peers) == 1, "every request should have reused the one idle connection"


async def test_interim_replies_are_skipped(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    proxy = await proxy_factory(relay="fast", upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/api/version") as resp:
        assert (resp.status, await resp.read()) == (200, b"ok")


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_trailer_never_becomes_a_header(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
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
    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve), observers=(spy,))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/x") as resp:
        assert await resp.read() == b"{}\n"
        assert "X-Trailer" not in resp.headers
        assert resp.headers["Content-Type"] == "application/x-ndjson"


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_reply_framed_by_the_close_is_relayed_whole(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        for i in range(5):
            writer.write(b"line %d\n" % i)
            await writer.drain()
        writer.close()

    spy = Recorder()
    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve), observers=(spy,))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/x") as resp:
        assert await resp.read() == b"".join(b"line %d\n" % i for i in range(5))
    assert spy.calls[-1][1][6] == Outcome.OK


@pytest.mark.parametrize("relay", RELAYS)
@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("POST", False)])
async def test_a_pooled_connection_dead_before_answering_is_retried_if_idempotent(
    relay: str,
    method: str,
    retried: bool,
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
) -> None:
    connections: set[int] = set()
    serve = _answered_then_dropped(connections)
    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(headers=_MARK) as s:
        async with s.request(method, proxy.url + "/x") as resp:
            assert await resp.read() == b"ok"
        async with s.request(method, proxy.url + "/x") as resp:
            assert resp.status == (200 if retried else 502)
    assert len(connections) == (2 if retried else 1)


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_slow_client_holds_the_upstream_back(
    relay: str, aiohttp_server: Callable[..., Awaitable[TestServer]], proxy_factory: MakeProxy
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
    proxy = await proxy_factory(relay=relay, upstream=str(server.make_url("")).rstrip("/"))
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/big") as resp:
        await asyncio.sleep(0.5)
        # Socket buffers on the way hold a few MiB; without back-pressure it would be all.
        assert written < total // 2
        assert len(await resp.read()) == total


@pytest.mark.parametrize("relay", RELAYS)
async def test_read_timeout_before_and_during_the_reply(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
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
        relay=relay, upstream=await raw_upstream(serve), read_timeout=0.2, observers=(spy,)
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


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_cut_after_the_streams_end_keeps_what_the_stream_said(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
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
    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve), observers=(spy,))
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
@pytest.mark.parametrize("relay", RELAYS)
async def test_duration_ends_at_the_last_write_not_after_the_replys_parse(
    relay: str,
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A single reply is parsed when it ends (an 8 MiB embedding takes tens of ms); made
    # to take 80 ms here, the parse must not count in the client's request duration.
    from proxy.ollama import readers

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
    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve), observers=(clock,))
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


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_length_less_reply_to_a_keep_alive_http_1_0_client_ends_with_the_connection(
    relay: str, proxy_factory: MakeProxy
) -> None:
    # HTTP/1.0 has no chunking: a stream's end is the connection's close (RFC 9112 §6.3),
    # whatever keep-alive the client asked for; kept open, the client would wait forever.
    proxy = await proxy_factory(relay=relay)
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


@pytest.mark.parametrize("relay", RELAYS)
async def test_an_upstream_that_answers_garbage_is_not_called_unreachable(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # Something listens and answers, but not with HTTP (a crashed runner's port reused,
    # the wrong service): the 502 says so, instead of "start Ollama".
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\nnot http at all\r\n\r\n")
        await writer.drain()
        writer.close()

    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", json={"model": "m"}) as resp:
            assert resp.status == 502
            message = (await resp.json())["error"]
    assert message.startswith("ollama-tap: Ollama at http://127.0.0.1:")
    assert "broke off the exchange without a valid reply" in message
    assert "\n" not in message and "start Ollama" not in message


@pytest.mark.parametrize("relay", RELAYS)
async def test_expect_continue_and_names_repeated_in_another_case_reach_an_upstream(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
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

    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve))
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


@pytest.mark.parametrize("relay", RELAYS)
async def test_a_long_reply_header_is_relayed(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    # 20,000 bytes: past aiohttp's client default (8,190), within what the proxy's server
    # takes from clients (64 KiB).
    long = b"v" * 20_000

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Long: %b\r\nContent-Length: 2\r\n\r\n{}" % long)
        await writer.drain()

    proxy = await proxy_factory(relay=relay, upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(max_field_size=65536) as s:
        async with s.get(proxy.url + "/api/tags") as resp:
            assert (resp.status, resp.headers["X-Long"]) == (200, long.decode())


# -- an https upstream ------------------------------------------------------------------------


@pytest.fixture
async def tls_upstream(
    tmp_path: Path, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> tuple[str, Path]:
    cert, key = tmp_path / "up-cert.pem", tmp_path / "up-key.pem"
    made = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await made.wait() == 0
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def generate(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        for token in ["a", "b"]:
            await resp.write(b'{"model":"m","response":"%s","done":false}\n' % token.encode())
        await resp.write(b'{"model":"m","response":"","done":true,"eval_count":2}\n')
        return resp

    app = web.Application()
    app.router.add_post("/api/generate", generate)
    server = await aiohttp_server(app, ssl=context)
    return f"https://127.0.0.1:{server.port}", cert


async def test_an_https_upstream_is_verified_and_relayed(
    tls_upstream: tuple[str, Path], proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = tls_upstream
    untrusted = await proxy_factory(relay="fast", upstream=url)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # read when the pool's context is made
    trusted = await proxy_factory(relay="fast", upstream=url)
    async with aiohttp.ClientSession() as s:
        async with s.post(untrusted.url + "/api/generate", json={"model": "m"}) as resp:
            assert resp.status == 502
            assert "certificate verify failed" in (await resp.json())["error"]
        async with s.post(trusted.url + "/api/generate", json={"model": "m"}) as resp:
            assert resp.status == 200
            assert len(await resp.read()) > 0


async def test_http_1_0_clients_get_the_body_framed_by_the_close(proxy: Proxy) -> None:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(b"GET /api/version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b'"version"' in body


async def test_a_reason_phrase_split_across_reads_is_kept_whole(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        for piece in (b"HTTP/1.1 200 O", b"K\r\nContent-Length: 2\r\n\r\nok"):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)

    proxy = await proxy_factory(relay="fast", upstream=await raw_upstream(serve))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(b"GET /api/version HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert (await reader.readuntil(b"\r\n")) == b"HTTP/1.1 200 OK\r\n"
    writer.close()


@pytest.mark.interpreted
async def test_an_upload_answered_early_that_stalls_loses_its_connection(
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ollama answers before the body ended; the rest is read and dropped for the
    lingering time (aiohttp's rule), then a client that stopped sending is cut."""
    from proxy.relay.http1 import server

    monkeypatch.setattr(server, "LINGER_SECONDS", 0.3)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\nno")
        await writer.drain()

    proxy = await proxy_factory(relay="fast", upstream=await raw_upstream(serve))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/blobs/sha256:00 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10000000\r\n\r\n"
        + b"x" * 300_000
    )
    assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 400")
    await reader.readuntil(b"\r\n\r\nno")
    assert await asyncio.wait_for(reader.read(), 3) == b""  # cut after the lingering time
    writer.close()


@pytest.mark.parametrize("relay", RELAYS)
async def test_an_upstream_path_prefix_is_kept_and_the_target_sent_as_is(
    relay: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
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
    proxy = await proxy_factory(relay=relay, upstream=upstream)
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


_HEAD_AND_FIRST_PIECE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'1f\r\n{"response":"hi","done":false}\n\r\n'
)
_REST = b'14\r\n{"done":true,"x":1}\n\r\n0\r\n\r\n'


async def _one_read_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Ollama's head and first token in one read, the rest a little later."""
    while await read_head(reader):
        await reader.readexactly(2)  # the `{}` body
        writer.write(_HEAD_AND_FIRST_PIECE)
        await asyncio.sleep(0.05)
        writer.write(_REST)


class HeadsClock(Recorder):
    """Notes when the observers were told of the reply's head."""

    def __init__(self) -> None:
        super().__init__()
        self.told_at: float | None = None
        self.ended: list[Exchange] = []

    def response_headers(self, ex: Exchange) -> None:
        super().response_headers(ex)
        self.told_at = time.monotonic()

    def response(self, ex: Exchange) -> None:
        super().response(ex)
        self.ended.append(ex)


async def test_observers_time_is_not_the_clients(
    proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    """The front tells the observers of a reply right after its head went out; the first
    piece is still stamped when it was written, before they ran (TTFT is the client's)."""
    observer = HeadsClock()
    proxy = await proxy_factory(
        relay="fast", upstream=await raw_upstream(_one_read_upstream), observers=(observer,)
    )
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", data=b"{}") as resp:
            assert await resp.read() == b'{"response":"hi","done":false}\n{"done":true,"x":1}\n'
    [ex] = observer.ended
    assert [name for name, _ in observer.calls] == [
        "request", "response_headers", "chunk", "response"
    ]  # fmt: skip
    assert ex.first_output is not None and observer.told_at is not None
    assert ex.first_output <= observer.told_at


@pytest.mark.interpreted
async def test_a_head_that_failed_is_not_announced(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug while taking the reply's head ends the exchange as `proxy_error` with a 500:
    observers are not told of a head (and status) the client never got."""
    from proxy.relay.http1 import relay

    def broken(*args: Any) -> tuple[bytes, bool]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(relay, "response_head", broken)
    recorder = Recorder()
    proxy = await proxy_factory(relay="fast", observers=(recorder,))
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", json={"model": "llama3.2"}) as resp:
            assert resp.status == 500
            assert "internal error" in (await resp.json())["error"]
    assert [name for name, _ in recorder.calls] == ["request", "error"]
    assert recorder.calls[-1][1][6] is Outcome.PROXY_ERROR


@pytest.mark.interpreted
async def test_a_reply_that_ended_before_its_relay_took_it_leaves_its_connection_usable(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request sent on arrival can have its whole reply read before the exchange's task
    adopts it (under load, uvloop polls again within a loop turn), and its connection is
    back in the pool by then. A client too slow for that reply must not pause the pooled
    connection, or the next request on it never gets an answer."""
    size = 200_000
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_threaded_upstream, args=(listener, size), daemon=True).start()
    late = Tap.drive

    async def drive_late(tap: Tap, relay: Relay[Any]) -> Any:
        if relay.tapped.ex.path == "/api/big":
            time.sleep(0.1)  # noqa: ASYNC251 -- a busy loop: the whole reply arrives meanwhile
            await asyncio.sleep(0)  # ... and is read before the relay runs
            await asyncio.sleep(0)
        return await late(tap, relay)

    def small_send_buffer(conn: FrontConnection, transport: asyncio.BaseTransport) -> None:
        # A remote client's socket (loopback's starts near 1 MiB): the reply fills it.
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        made(conn, transport)

    def large_receive_buffer(conn: UpstreamConnection, transport: asyncio.BaseTransport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        up_made(conn, transport)

    adopted: list[tuple[str, bool]] = []

    def noting(relay: Http1Relay) -> Reply | None:
        reply = adopt(relay)
        if reply is not None:
            adopted.append((relay.request.path, reply.ended))
        return reply

    adopt = Http1Relay.adopt_sent
    monkeypatch.setattr(Http1Relay, "adopt_sent", noting)
    made, up_made = FrontConnection.connection_made, UpstreamConnection.connection_made
    monkeypatch.setattr(FrontConnection, "connection_made", small_send_buffer)
    monkeypatch.setattr(UpstreamConnection, "connection_made", large_receive_buffer)
    monkeypatch.setattr(Tap, "drive", drive_late)
    proxy = await proxy_factory(
        relay="fast", upstream=f"http://127.0.0.1:{listener.getsockname()[1]}"
    )
    async with aiohttp.ClientSession() as s:  # leaves an idle pooled connection
        assert (await fetch(s, "GET", proxy.url + "/api/tags", None))[0] == 200
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.setblocking(False)
    await asyncio.get_running_loop().sock_connect(slow, (proxy.host, proxy.port))
    slow.send(b"POST /api/big HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}")
    await asyncio.sleep(0.4)
    async with aiohttp.ClientSession() as s:
        status = await asyncio.wait_for(fetch(s, "GET", proxy.url + "/api/tags", None), 5)
    assert status[0] == 200
    assert ("/api/big", True) in adopted, "the reply did not end before it was adopted"
    slow.close()
    listener.close()


def _threaded_upstream(listener: socket.socket, size: int) -> None:
    """Keep-alive HTTP/1.1 on its own thread, so it answers while the proxy's loop is busy:
    `size` bytes for /api/big, a small JSON object for anything else."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_connection, args=(conn, size), daemon=True).start()


def _serve_connection(conn: socket.socket, size: int) -> None:
    data = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, data = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            need = int(length.group(1)) if length else 0
            while len(data) < need:
                data += conn.recv(65536)
            data = data[need:]
            body = b"x" * size if b" /api/big " in head.split(b"\r\n")[0] + b" " else b"{}"
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
            )


_OURS = (FrontConnection, Http1Relay, AiohttpRelay, Tapped, Reply, Exchange, UpstreamConnection)
_GENERATE = orjson.dumps({"model": "llama3.2", "prompt": "hi"})


def _answer(delay: float, reply: bytes) -> RawHandler:
    """An upstream answering `reply` to requests marked X-Test after `delay` (the poller's
    reads get a 404)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await read_head(reader):
            if b"X-Test" not in head:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            await asyncio.sleep(delay)
            writer.write(reply)

    return serve


_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
_GET = b"GET /x HTTP/1.1\r\nHost: localhost\r\nX-Test: 1\r\n\r\n"
_Requests = list[tuple[bytes, bytes | None]]
"""Each request's bytes and what ends its reply (None: the client leaves after 0.2 s)."""
# name: (upstream (None: the fake Ollama), settings, requests, one connection for them all)
_STREAMED = (
    b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%b" % (len(_GENERATE), _GENERATE),
    b"\r\n0\r\n\r\n",
)
_PATHS: dict[str, tuple[RawHandler | None, dict[str, Any], _Requests, bool]] = {
    "streamed, a connection each": (None, {}, [_STREAMED] * 3, False),
    "streamed, kept alive": (None, {}, [_STREAMED] * 3, True),
    "the client leaves before the reply": (_answer(1.0, _OK), {}, [(_GET, None)] * 3, False),
    "Ollama closes after its reply": (
        _answer(0, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"),
        {},
        [(_GET, b"ok")] * 3,
        False,
    ),
    "a reused connection dies and the request is retried": (
        _answered_then_dropped(), {}, [(_GET, b"ok")] * 3, True
    ),
    "a read timeout before the reply": (
        _answer(5.0, _OK), {"read_timeout": 0.2}, [(_GET, b"\r\n\r\n")] * 3, False
    ),
    "handed to aiohttp (HTTP/1.0)": (
        _answer(0, _OK), {}, [(_GET.replace(b"HTTP/1.1", b"HTTP/1.0"), b"ok")] * 3, False
    ),
}  # fmt: skip


async def _left_to_the_collector(
    proxy: Proxy, exchanges: Callable[[], Awaitable[None]]
) -> list[str]:
    """Our objects the cyclic collector finds after `exchanges` ran a second time (the first
    makes the pool's connections, which stay) and the proxy saw their connections close;
    asserts too that the Exchanges were freed, not kept alive somewhere."""
    front = proxy.app[FRONT]
    assert front is not None

    async def run() -> None:
        await exchanges()
        for _ in range(100):  # until the proxy saw every connection close
            if not front.connections:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # and cancelled or ended what ran on them

    await run()
    gc.collect()
    made = len([o for o in gc.get_objects() if isinstance(o, Exchange)])
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await run()
        gc.collect()
        left = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, _OURS))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert len([o for o in gc.get_objects() if isinstance(o, Exchange)]) <= made
    return left


@pytest.mark.parametrize("path", list(_PATHS))
async def test_an_exchange_is_freed_when_it_ends_not_by_the_garbage_collector(
    path: str,
    proxy_factory: MakeProxy,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
) -> None:
    """No reference cycle outlives an exchange or a closed connection (the relay and its
    reply, the parsers and their reply or connection, an error's traceback and the relay
    in its frames), however the exchange ends. With one, every exchange waits for the
    cyclic collector, whose passes walk them all while every stream waits."""
    upstream, settings, requests, kept_alive = _PATHS[path]
    if upstream is not None:
        settings = {**settings, "upstream": await raw_upstream(upstream)}
    proxy = await proxy_factory(relay="fast", **settings)

    async def exchanges() -> None:
        connection = None
        for request, end in requests:
            if connection is None:
                connection = await asyncio.open_connection(proxy.host, proxy.port)
            reader, writer = connection
            writer.write(request)
            if end is None:
                await asyncio.sleep(0.2)
            else:
                await reader.readuntil(end)
            if not kept_alive:
                writer.close()
                await writer.wait_closed()
                connection = None
        if connection is not None:
            connection[1].close()
            await connection[1].wait_closed()

    assert await _left_to_the_collector(proxy, exchanges) == []


@pytest.mark.interpreted
async def test_an_exchange_ended_by_a_bug_of_ours_is_freed_too(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug a relay keeps until its task raises it holds a traceback into the relay."""
    from proxy.relay.http1 import relay

    def broken(*args: Any) -> tuple[bytes, bool]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(relay, "response_head", broken)
    proxy = await proxy_factory(relay="fast")

    async def exchanges() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.post(proxy.url + "/api/generate", json={"model": "llama3.2"}) as r:
                    assert r.status == 500

    assert await _left_to_the_collector(proxy, exchanges) == []

"""The HTTP/1 transport (setting `relay = "fast"`): the mechanics it implements itself
(pool, framing, TLS upstreams, sending on arrival, freeing an exchange when it ends)."""

from __future__ import annotations

import asyncio
import gc
import re
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.relay import FRONT
from ollama_tap.relay.http1.pool import UpstreamConnection
from ollama_tap.relay.http1.relay import Http1Relay
from ollama_tap.relay.http1.reply import Reply
from ollama_tap.relay.http1.server import FrontConnection
from ollama_tap.relay.tap import Tap, Transport
from ollama_tap.relay.tapped import Tapped
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.relaying import (
    MARK,
    RawHandler,
    Recorder,
    answered_then_dropped,
    read_head,
)
from tests.support.transparency import fetch


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

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    async with aiohttp.ClientSession(headers=MARK) as s:
        for method in ["GET", "HEAD", "GET", "HEAD", "GET"] * 4:
            async with s.request(method, proxy.url + "/x") as resp:
                assert resp.headers["Content-Length"] == "5"
                assert await resp.read() == (b"" if method == "HEAD" else b"hello")
    assert len(peers) == 1, "every request should have reused the one idle connection"


@pytest.mark.parametrize("version", ["1.1", "1.0"])
async def test_interim_replies_reach_an_http_1_1_client_but_a_stray_100(
    version: str, proxy_factory: MakeProxy, raw_upstream: Callable[[RawHandler], Awaitable[str]]
) -> None:
    """103 Early Hints and 102 Processing are passed on, before the final head, minus
    hop-by-hop headers; a 100 nobody asked the upstream for is not; an HTTP/1.0 client gets
    none (RFC 9110 §15.2)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_head(reader):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            writer.write(b"HTTP/1.1 102 Processing\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)  # the proxy relays each as it comes
            writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nConnection: x\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(f"GET /api/version HTTP/{version}\r\nHost: localhost\r\n\r\n".encode())
    heads = []
    while not heads or b" 200 " not in heads[-1]:
        heads.append(await asyncio.wait_for(read_head(reader), 5))
    assert await reader.readexactly(2) == b"ok"
    writer.close()
    interims = [
        b"HTTP/1.1 102 Processing\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    ]
    assert heads[:-1] == (interims if version == "1.1" else [])
    assert heads[-1].startswith(f"HTTP/{version} 200 OK".encode())


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
    untrusted = await proxy_factory(upstream=url)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # read when the pool's context is made
    trusted = await proxy_factory(upstream=url)
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

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
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
    from ollama_tap.relay.http1 import request

    monkeypatch.setattr(request, "LINGER_SECONDS", 0.3)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\nno")
        await writer.drain()

    proxy = await proxy_factory(upstream=await raw_upstream(serve))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/blobs/sha256:00 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10000000\r\n\r\n"
        + b"x" * 300_000
    )
    assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 400")
    await reader.readuntil(b"\r\n\r\nno")
    assert await asyncio.wait_for(reader.read(), 3) == b""  # cut after the lingering time
    writer.close()


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
        upstream=await raw_upstream(_one_read_upstream), observers=(observer,)
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
    from ollama_tap.relay.http1 import relay

    def broken(*args: Any) -> tuple[bytes, bool]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(relay, "response_head", broken)
    recorder = Recorder()
    proxy = await proxy_factory(observers=(recorder,))
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

    async def drive_late(tap: Tap, relay: Transport) -> None:
        if relay.tapped.ex.path == "/api/big":
            time.sleep(0.1)  # noqa: ASYNC251 -- a busy loop: the whole reply arrives meanwhile
            await asyncio.sleep(0)  # ... and is read before the relay runs
            await asyncio.sleep(0)
        await late(tap, relay)

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
    proxy = await proxy_factory(upstream=f"http://127.0.0.1:{listener.getsockname()[1]}")
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


_OURS = (FrontConnection, Http1Relay, Tapped, Reply, Exchange, UpstreamConnection)
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
        answered_then_dropped(), {}, [(_GET, b"ok")] * 3, True
    ),
    "a read timeout before the reply": (
        _answer(5.0, _OK), {"read_timeout": 0.2}, [(_GET, b"\r\n\r\n")] * 3, False
    ),
    "HTTP/1.0": (
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
    proxy = await proxy_factory(**settings)

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
    from ollama_tap.relay.http1 import relay

    def broken(*args: Any) -> tuple[bytes, bool]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(relay, "response_head", broken)
    proxy = await proxy_factory()

    async def exchanges() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.post(proxy.url + "/api/generate", json={"model": "llama3.2"}) as r:
                    assert r.status == 500

    assert await _left_to_the_collector(proxy, exchanges) == []

"""The HTTP/1 transport's parts fed bytes through mock transports: orderings that sockets
would only give by chance are set up by feeding events in that order."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry
from yarl import URL

from ollama_tap.config import Settings
from ollama_tap.exchange import Outcome
from ollama_tap.hooks import Hooks
from ollama_tap.relay.http1.bounds import MAX_HEAD, MAX_LINGER
from ollama_tap.relay.http1.flow import FlowControl
from ollama_tap.relay.http1.pool import UpstreamConnection, UpstreamPool
from ollama_tap.relay.http1.relay import Http1Relay
from ollama_tap.relay.http1.reply import Reply
from ollama_tap.relay.http1.request import FrontRequest
from ollama_tap.relay.http1.server import Front, FrontConnection
from ollama_tap.relay.http1.serves import OwnedPaths, Rule, origin_form
from ollama_tap.relay.tap import Tap
from tests.support.spy import Spy


class Transport(asyncio.Transport):
    """A socket that keeps what is written to it and how it was left."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = self.aborted = self.paused = self.eof = False
        self.protocol: asyncio.BaseProtocol | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5000) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def writelines(self, data: Any) -> None:
        for piece in data:
            self.written += piece

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol


class Link:
    """An upstream connection as a reply sees it."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.uses = 2
        self.paused = self.aborted = False
        self.ended: list[Reply] = []

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def reply_ended(self, reply: Reply) -> None:
        self.ended.append(reply)


class Handed(asyncio.Protocol):
    """aiohttp's server as the front sees it: what a handed-off connection brought."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data


class Handing:
    """aiohttp's server as the front sees it: the protocol factory, and no connections."""

    def __init__(self) -> None:
        self.connections: list[object] = []

    def __call__(self) -> Handed:
        return Handed()


def front(routes: tuple[str, ...] = ("/_tap/healthz", "/_tap/{tail:.*}", "/metrics")) -> Front:

    async def ok(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    for route in routes:
        app.router.add_get(route, ok)
    settings = Settings(upstream="http://127.0.0.1:9")
    tap = Tap(settings, Hooks([], CollectorRegistry()))
    made = Front(
        tap,
        {"default": UpstreamPool(URL("http://127.0.0.1:9"), 1.0, None)},
        Rule(OwnedPaths(app.router), check_host=True),
    )
    made.attach(cast(web.Server, Handing()))
    return made


def connected(made: Front) -> tuple[FrontConnection, Transport]:
    conn, transport = made(), Transport()
    conn.connection_made(transport)
    return conn, transport


def get(path: str, version: str = "1.1", extra: str = "") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: localhost\r\n{extra}\r\n".encode()


def test_the_proxys_own_paths_come_from_the_router() -> None:
    owned = front().rule.owned
    assert "/_tap/healthz" in owned and "/_tap/api/records/x" in owned and "/metrics" in owned
    assert "/api/tags" not in owned and "/_tapx" not in owned and "/metrics/x" not in owned


async def test_a_request_for_the_proxy_goes_to_aiohttp_with_every_byte() -> None:
    made = front()
    conn, transport = connected(made)
    conn.data_received(b"GET /_tap/heal")
    conn.data_received(b"thz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    handed = transport.protocol
    assert isinstance(handed, Handed) and handed.transport is transport
    assert bytes(handed.data) == get("/_tap/healthz")
    assert conn not in made.connections and conn.task is None


async def test_http10_and_expect_are_the_fronts() -> None:
    for request in (get("/api/tags", "1.0"), get("/api/tags", extra="Expect: 100-continue\r\n")):
        conn, transport = connected(front())
        conn.data_received(request)
        assert transport.protocol is None and conn.task is not None
        conn.task.cancel()
        conn.connection_lost(None)


async def test_an_expectation_is_met_when_the_exchange_reads_the_body() -> None:
    conn, transport = connected(front())
    conn.data_received(get("/api/tags") + b"POST /api/show HTTP/1.1\r\nHost: localhost\r\n"
                       b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")  # fmt: skip
    assert b"100 Continue" not in transport.written  # queued: never inside the reply before
    assert conn.task is not None and len(conn.queue) == 1
    conn.task.cancel()
    await asyncio.sleep(0)
    conn.after_exchange(keep=True)
    assert transport.written.endswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    conn.data_received(b"{}")  # the body, once the client had its 100
    assert conn.current is None
    assert conn.task is not None
    conn.task.cancel()
    conn.connection_lost(None)


def test_an_absolute_target_is_relayed_by_its_path() -> None:
    assert origin_form("/api/tags?x=1") == "/api/tags?x=1"
    assert origin_form("http://h:1/api/tags?x=1") == "/api/tags?x=1"
    assert origin_form("HTTPS://h") == "/" and origin_form("http://h?x=1") == "/?x=1"
    assert origin_form("*") == "" and origin_form("h:443") == "" and origin_form("ftp://h/x") == ""


async def test_pipelined_requests_queue_in_order_and_one_for_aiohttp_behind_them_is_refused() -> (
    None
):
    conn, transport = connected(front())
    conn.data_received(get("/api/version") + get("/api/tags") + get("/_tap/healthz"))
    assert conn.task is not None and [r.path for r in conn.queue] == ["/api/tags"]
    assert conn.pending == "refuse"  # it began in the read that ended the one before
    assert transport.paused
    conn.task.cancel()
    conn.queue.clear()
    await asyncio.sleep(0)
    conn.after_exchange(keep=True)
    assert transport.written.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"must come first" in transport.written
    # Lingering: the write side closed, what the client still sends read and dropped.
    assert transport.eof and not transport.paused and not transport.closed


async def test_bytes_that_do_not_parse_get_the_fronts_400_at_a_clean_start() -> None:
    conn, transport = connected(front())
    conn.data_received(b"\x16\x03\x01 not http\r\n\r\n")
    assert transport.protocol is None and transport.eof and not transport.closed
    assert transport.written.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"could not be parsed" in transport.written
    conn.data_received(b"more of the same")  # lingering: dropped, not parsed
    assert not transport.aborted and transport.written.count(b"HTTP/1.1 400") == 1
    conn.data_received(b"x" * MAX_LINGER)
    assert transport.aborted


async def test_a_reply_that_ended_before_its_relay_took_it_is_delivered_and_frees_its_link() -> (
    None
):
    """Sent on arrival, the whole reply can be read before the exchange's task adopts it;
    its connection is back in the pool by then, so the relay must not pause it."""
    link = Link()
    reply = Reply(link, head_only=False)
    reply.feed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n")
    reply.feed(b'{"ok":true}')
    assert reply.ended and link.ended == [reply] and not link.paused

    ended = Spy()
    tap = Tap(Settings(upstream="http://127.0.0.1:9"), Hooks([ended], CollectorRegistry()))
    transport = Transport()

    class Client:
        def __init__(self) -> None:
            self.transport = transport
            self.flow = FlowControl()
            self.flow.transport = transport
            transport.pause_reading()

        @property
        def closing(self) -> bool:
            return False

    client = Client()
    request = FrontRequest(
        client.flow,
        "GET",
        "/api/show",
        CIMultiDict({"Host": "localhost"}),
        "127.0.0.1",
        asyncio.get_running_loop().time(),
        version="1.1",
        keep_alive=True,
    )
    request.sent = reply
    client.flow.writing_paused = True  # a client too slow for the whole reply
    relay = Http1Relay(
        tap, {"default": UpstreamPool(URL("http://127.0.0.1:9"), 1.0, None)}, client, request
    )
    await asyncio.wait_for(tap.drive(relay), 2)
    head, _, body = bytes(transport.written).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b'{"ok":true}'
    assert not link.paused and not link.aborted
    assert [ex.outcome for ex in ended.ended] == [Outcome.OK]


async def test_a_request_that_arrived_whole_is_sent_before_its_exchange_runs() -> None:
    """With an idle pooled connection, the request is written upstream from the read that
    brought it; the exchange's task has not run yet (it adopts the reply)."""
    made = front()
    upstream, wire = UpstreamConnection(made.pool, asyncio.get_running_loop()), Transport()
    upstream.connection_made(wire)
    made.pool.release(upstream)
    conn, _ = connected(made)
    body = b'{"model":"m","prompt":"hi"}'
    conn.data_received(
        b"POST /api/generate?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%b"
        % (len(body), body)
    )
    assert bytes(wire.written) == (
        b"POST /api/generate?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 27\r\n\r\n" + body
    )
    assert conn.task is not None and not conn.task.done() and conn.relay is None
    conn.task.cancel()
    conn.connection_lost(None)


async def test_a_read_that_spans_heads_counts_only_the_open_one() -> None:
    """A read that begins inside one head and ends inside another (a paused pipelining
    client's backlog, read at once on resume) is not all head: only the head still open
    at its end counts, and only what its callbacks saw."""
    made = front()
    conn, transport = connected(made)
    conn.data_received(b"GET /api/ver")  # the first head, left open
    rest = b"sion HTTP/1.1\r\nHost: localhost\r\n\r\n"
    pipelined = get("/api/version") * (2 * MAX_HEAD // len(get("/api/version")))
    conn.data_received(rest + pipelined + b"GET /api/tags HTTP/1.1\r\nHost: loc")  # one read
    assert not transport.aborted
    assert conn.bounds.head_size < MAX_HEAD
    assert len(conn.queue) == pipelined.count(b"GET ")
    assert conn.task is not None
    conn.task.cancel()
    conn.connection_lost(None)

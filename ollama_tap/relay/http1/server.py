"""The HTTP/1 server: the listening socket's connections, parsed by llhttp.

It relays every request for Ollama (HTTP/1.1 and HTTP/1.0, `Expect: 100-continue` met
itself), refuses what cannot be relayed with one framing (serves.py), and gives a request
for the proxy's own paths, with its connection and every byte read so far, to aiohttp's
server at a request boundary, which answers it and closes the connection (relay/__init__.py).
Kept from aiohttp's server: keep-alive, pipelined requests answered in order, bodies streamed
with back-pressure, a client that leaves cancels its exchange, and a graceful shutdown.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Final, Literal, cast

import httptools
import structlog
from aiohttp import web
from multidict import CIMultiDict

from ollama_tap.relay import failures
from ollama_tap.relay.failures import ClientGone
from ollama_tap.relay.headers import text
from ollama_tap.relay.http1.bounds import Linger, ReadBounds
from ollama_tap.relay.http1.clients import Clients
from ollama_tap.relay.http1.flow import FlowControl
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.relay import Http1Relay
from ollama_tap.relay.http1.request import BodyClock, FrontRequest, Parse
from ollama_tap.relay.http1.send import send_on_arrival
from ollama_tap.relay.http1.serves import OWN, TOO_LARGE, Refusal, Rule, origin_form
from ollama_tap.relay.tap import Tap

log = structlog.get_logger("ollama_tap.front")

CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
MAX_QUEUED: Final = 16
"""Pipelined requests parsed ahead of the one being answered before reading pauses."""


class _Stop(Exception):
    """Raised inside the parser's callback: this request is aiohttp's, or refused."""


Pending = Literal["hand-off", "refuse", "close", "linger"]
"""Parsing has stopped; what waits for the running exchange to end: the connection goes to
aiohttp, a request is refused (`refusal`), or the connection closes (the parser stopped
after a request that asked to upgrade its connection)."""


class Front:
    """The protocol factory of the listening socket, and the connections it serves."""

    def __init__(self, tap: Tap, pools: dict[str, UpstreamPool], rule: Rule) -> None:
        self.tap, self.pools, self.rule = tap, pools, rule
        self.pool = pools[tap.boxes.first.name]
        self.on_arrival = tap.router is None
        """Whether requests may be sent on arrival: with several boxes the router decides
        where first, from the exchange (one loop turn later)."""
        self.guard = tap.guard
        self.clients = Clients()
        self.connections = self.clients.connections
        self.debug = tap.settings.log_level == "debug"
        self.body_timeouts = 0
        """Connections cut for a stalled request body (request.STALL_SECONDS)."""

    @property
    def closing(self) -> bool:
        return self.clients.closing

    def attach(self, server: web.Server) -> None:
        """aiohttp's server (the runner's), for the connections handed off."""
        self.clients.aiohttp = server

    def __call__(self) -> FrontConnection:
        return FrontConnection(self)


class FrontConnection(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, answered one at a time."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.flow = FlowControl()
        self.remote = ""
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        """Dropped when the connection is lost: it holds this connection's methods, a cycle
        that only the garbage collector would otherwise break."""
        # The bytes of the current request from its first one, kept until the front knows
        # it serves it: a hand-off gives aiohttp every one of them. `whole` is False when
        # the request began inside the read that ended the previous one (pipelining): its
        # first byte is then somewhere in `raw`, and it cannot be handed over.
        self.raw: list[bytes] = []
        self.keeping = True
        self.whole = True
        self.parsing = Parse.BETWEEN
        self.ended_in_read = False
        self.bounds = ReadBounds()
        self.refusal = b""
        """The response to a refused request (`serves.Refusal`)."""
        self.linger: Linger | None = None
        """The close after the refusal, once it is written (`refuse`)."""
        self.clock = BodyClock(self.flow)
        self.url: list[bytes] = []
        self.header_list: list[tuple[str, str]] = []
        self.longest_field = 0
        self.current: FrontRequest | None = None
        """The request whose body is being read."""
        self.fresh: FrontRequest | None = None
        """A request whose exchange was started in the current read: if its body ends in
        the same read, it is sent upstream at once (`send_on_arrival`)."""
        self.queue: collections.deque[FrontRequest] = collections.deque()
        self.task: asyncio.Task[None] | None = None
        self.relay: Http1Relay | None = None
        self.pending: Pending | None = None

    @property
    def closing(self) -> bool:
        return self.front.closing

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.flow.transport = self.transport
        peer = transport.get_extra_info("peername")
        self.remote = str(peer[0]) if isinstance(peer, tuple) else ""
        self.front.clients.admit(self)

    def data_received(self, data: bytes) -> None:
        if self.keeping:
            self.raw.append(data)
        if self.pending is not None:
            # Parsing has stopped and reading is paused (aiohttp's bytes, or nobody's), or a
            # refused request's connection is lingering (`refuse`).
            if self.linger is not None:
                self.linger.drop(len(data))
            return
        parser = self.parser
        if parser is None:
            return  # the connection was lost
        self.ended_in_read = False
        bounds = self.bounds
        bounds.read()
        try:
            parser.feed_data(data)
        except (_Stop, httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.fresh = None
            if isinstance(exc, httptools.HttpParserUpgrade):
                # llhttp parses nothing after a request that asked to upgrade: it was
                # relayed as a plain one, and the connection ends with it.
                self.pending = "close"
            # httptools re-raises a callback's exception, maybe wrapped: `pending` tells a
            # hand-off from bad bytes.
            if not self.handing_off():
                self.unparseable(exc)
            elif self.task is None:
                self.after_exchange(keep=True)
            else:
                self.pause_reading()
            return
        self.fresh = None
        parsing = self.parsing
        if parsing is Parse.BETWEEN:
            self.raw, self.keeping, self.whole = [], True, True
        elif parsing is Parse.HEAD:
            if (too_large := bounds.head_read(len(data))) is not None:
                self.unparseable(too_large, TOO_LARGE)
        elif self.current is not None:
            # A body that spans reads is watched for a stall (armed once, only for those).
            clock = self.clock
            if bounds.fed:
                clock.last_byte = time.monotonic()
            clock.watch(self.stalled)
            if (too_large := bounds.body_read(len(data))) is not None:
                self.unparseable(too_large)

    def connection_lost(self, exc: Exception | None) -> None:
        self.parser = None
        self.front.clients.leave(self)
        self.clock.stop()
        if self.current is not None:
            self.current.body.fail(ClientGone("the client closed the connection"))
        relay = self.relay
        if self.task is not None and not (relay is not None and relay.delivered()):
            # aiohttp's handler_cancellation: the exchange ends as `client_disconnected`
            # (or `shutdown`) and the upstream connection is closed, so Ollama stops.
            self.task.cancel()
        self.flow.lost(None)

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    # -- llhttp callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.parsing = Parse.HEAD
        self.bounds.begin()
        if self.ended_in_read:
            self.whole = False
        self.url, self.header_list, self.longest_field = [], [], 0

    def on_url(self, url: bytes) -> None:
        self.url.append(url)
        self.bounds.head_part(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.current is None:  # else a chunked body's trailer: not relayed
            # text() inline: a call less per name and value of every request.
            self.header_list.append(
                (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
            )
            self.longest_field = max(self.longest_field, len(name), len(value))
            self.bounds.head_part(len(name) + len(value))

    def on_headers_complete(self) -> None:
        arrived = time.monotonic()
        self.parsing = Parse.BODY
        self.bounds.head_ended()
        parser = self.parser
        assert parser is not None  # a callback of its own feed_data
        target = origin_form(text(b"".join(self.url)))
        version = parser.get_http_version()
        request = FrontRequest(
            self,
            parser.get_method().decode("ascii", "surrogateescape"),
            target,
            CIMultiDict(self.header_list),
            self.remote,
            arrived,
            version=version,
            keep_alive=parser.should_keep_alive() and not self.front.closing,
        )
        request.longest_field = self.longest_field
        route = self.front.rule.route(version, request, target)
        if route == OWN and self.whole:
            self.pending = "hand-off"
            raise _Stop
        if route == OWN:
            route = Refusal(400, failures.REFUSED_PIPELINED)
        if isinstance(route, Refusal):
            log.info("front_refused", status=route.status, error=route.message)
            self.pending, self.refusal = "refuse", route.response(request.path, version)
            raise _Stop
        self.current = request
        self.raw, self.keeping = [], False
        if self.task is None:
            if self.front.closing:
                self.transport.close()  # shutting down: no new exchange
                return
            self.start(request)
            self.fresh = request
        else:
            self.queue.append(request)
            if len(self.queue) >= MAX_QUEUED:
                self.pause_reading()

    def on_body(self, body: bytes) -> None:
        self.bounds.fed = True
        if self.current is not None:
            self.current.body.feed(body)

    def on_message_complete(self) -> None:
        request = self.current
        if request is not None:
            request.body.feed_eof()
            self.current = None
            front = self.front
            # A request the reload guard may rewrite waits for its exchange (Tapped.upload).
            sent = (
                request is self.fresh
                and front.on_arrival
                and (
                    front.guard is None
                    or not front.guard.covers(request.method, request.rel_url.raw_path)
                )
                and send_on_arrival(front.pool, front.tap.target, request)
            )
            if sent and front.debug:  # not even a filtered call otherwise: it runs per request
                log.debug("sent_on_arrival", path=request.rel_url.raw_path)
        self.clock.stop()
        self.parsing = Parse.BETWEEN
        self.ended_in_read = True

    # -- exchanges ----------------------------------------------------------------------

    def handing_off(self) -> bool:
        """Whether a request was found to be aiohttp's (set inside the parser's callback,
        which the type checker cannot see through)."""
        return self.pending is not None

    def start(self, request: FrontRequest) -> None:
        self.front.clients.wake(self)
        if request.expects_continue and not request.body.is_eof():
            # Met here, as nginx and aiohttp meet it, rather than passed upstream as Caddy
            # does: an upstream may ignore Expect (RFC 9110), and the body would then wait
            # for a 100 that never comes. Written when the exchange starts, so never in the
            # middle of the reply before it.
            self.transport.write(CONTINUE)
        self.task = asyncio.get_running_loop().create_task(self.serve(request))

    async def serve(self, request: FrontRequest) -> None:
        transport, front = self.transport, self.front
        try:
            self.relay = Http1Relay(front.tap, front.pools, self, request)
            await front.tap.drive(self.relay)
        except (asyncio.CancelledError, Exception):
            # Cancelled (client gone, shutdown) or a bug the driver logged and recorded:
            # either way the client's reply was cut there, and so is the connection.
            transport.abort()
            return
        finally:
            self.task = self.relay = None
            if request.sent is not None:  # never adopted: the exchange ended before its send
                request.sent.drop()
        if not request.body.is_eof():
            # The exchange ended before its upload (Ollama answered early): the rest of the
            # body is read and dropped for a while, as aiohttp's server does, keeping the
            # connection if it ends in time.
            request.body.discard()
            self.clock.linger(self.cut)
        self.after_exchange(request.keep_alive and not front.closing)

    def after_exchange(self, keep: bool) -> None:
        """The exchange ended: the next request in order, else a deferred hand-off, else
        wait for the next request (or close)."""
        transport = self.transport
        if transport.is_closing():
            return
        if not keep:
            transport.close()
        elif self.queue:
            if self.pending is None:
                self.resume_reading()
            self.start(self.queue.popleft())
        elif self.pending == "hand-off":
            self.hand_off()
        elif self.pending == "refuse":
            self.refuse()
        elif self.pending == "close":
            transport.close()
        else:
            self.front.clients.rest(self)

    def refuse(self) -> None:
        """Write the refusal, then close lingering (bounds.Linger)."""
        linger = Linger(self.transport)
        if linger.answer(self.refusal):
            self.pending, self.keeping, self.raw, self.linger = "linger", False, [], linger
            self.clock.linger(linger.cut)
            self.flow.resume_reading()

    def hand_off(self) -> None:
        """Give the connection, and every byte of the current request, to aiohttp's server."""
        self.parser = None
        data, self.raw = b"".join(self.raw), []
        self.front.clients.hand_off(self, data, paused=self.flow.reading_paused)

    def unparseable(self, exc: Exception, refusal: Refusal | None = None) -> None:
        """Bytes llhttp refuses (an ambiguous framing among them), or a head or framing past
        its bound. Between requests, reading stops, and what came before is answered first:
        then the proxy's 400 (`refusal`, else one that quotes llhttp) closes the connection,
        as nginx answers. Inside a body, the connection is cut."""
        error = str(exc) or type(exc).__name__
        log.info("front_unparseable", error=error)
        if self.current is None:
            refusal = refusal or Refusal(400, failures.unparseable(error))
            self.pending, self.refusal = "refuse", refusal.response("", "1.1")
            if self.task is None:
                self.after_exchange(keep=True)
            else:
                self.pause_reading()
            return
        self.current.body.fail(ClientGone(f"the request could not be parsed: {error}"))
        self.transport.abort()

    def stalled(self, why: str) -> None:
        """The body brought no byte for STALL_SECONDS: counted and logged, then cut."""
        if self.current is not None:
            self.front.body_timeouts += 1
            log.info("front_body_timeout", error=why)
        self.cut(why)

    def cut(self, why: str) -> None:
        """A body stalled, or its dropped rest did not end in time: the connection goes
        (and an exchange waiting for the body ends as the client's doing)."""
        if self.current is not None:
            log.info("front_body_cut", error=why)
            self.current.body.fail(ClientGone(why))
            self.transport.abort()

    def close_if_idle(self) -> None:
        if self.task is None and self.current is None:
            self.transport.close()

    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        if len(self.queue) < MAX_QUEUED:
            self.flow.resume_reading()

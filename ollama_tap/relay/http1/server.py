"""The HTTP/1 transport's server: the listening socket's connections, parsed by llhttp.

It relays what `serves.Rule` accepts; any other request goes, with its connection and every
byte read so far, to aiohttp's server (the aiohttp transport), at a request boundary, for good.
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

from ollama_tap.ollama import error_body
from ollama_tap.relay.failures import REFUSED_PIPELINED, ClientGone, unparseable_after
from ollama_tap.relay.headers import MAX_FIELD, error_response, text
from ollama_tap.relay.http1.clients import Clients
from ollama_tap.relay.http1.flow import FlowControl
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.relay import Http1Relay
from ollama_tap.relay.http1.request import FrontRequest
from ollama_tap.relay.http1.send import send_on_arrival
from ollama_tap.relay.http1.serves import Rule
from ollama_tap.relay.tap import Tap

log = structlog.get_logger("ollama_tap.front")

LINGER_SECONDS: Final = 10.0
"""How long the rest of an upload Ollama answered early is read and dropped before the
connection is cut (aiohttp's lingering time)."""
MAX_HEAD: Final = 128 * 1024
"""Bytes of a request head past which parsing stops (llhttp has no limit of its own): the
request goes to aiohttp, which refuses it, or the connection is cut."""
MAX_FRAMING: Final = MAX_FIELD
"""Bytes of a chunked body's framing (chunk-size lines, extensions, trailer fields) in a row,
without a body byte between them, past which the connection is cut: llhttp bounds none of
them and httptools grows a trailer field by concatenation (aiohttp stops at 64 KiB too)."""
MAX_QUEUED: Final = 16
"""Pipelined requests parsed ahead of the one being answered before reading pauses."""


class _HandOff(Exception):
    """Raised inside the parser's callback: this request is aiohttp's."""


class _TooLarge(Exception):
    """The request head passed MAX_HEAD, or a body's framing MAX_FRAMING."""


Pending = Literal["hand-off", "refuse"]
"""What waits for the running exchange to end: the connection goes to aiohttp, or what
cannot be handed over (a request, or bytes that do not parse, begun in the read that ended
the request before) is refused."""


class Front:
    """The protocol factory of the listening socket, and the connections it serves."""

    def __init__(self, tap: Tap, pool: UpstreamPool, rule: Rule) -> None:
        self.tap, self.pool, self.rule = tap, pool, rule
        self.clients = Clients()
        self.connections = self.clients.connections
        self.debug = tap.settings.log_level == "debug"
        self.body_timeouts = 0  # connections cut for a stalled request body (BODY_IDLE)

    @property
    def closing(self) -> bool:
        return self.clients.closing

    def attach(self, server: web.Server) -> None:
        """aiohttp's server (the runner's), for the connections handed off."""
        self.clients.aiohttp = server

    def __call__(self) -> FrontConnection:
        return FrontConnection(self)

    def aiohttp_protocol(self) -> asyncio.Protocol:
        server = self.clients.aiohttp
        assert server is not None, "Front.attach was not called"
        return server()


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
        self.in_message = False
        self.in_head = False
        self.ended_in_read = False
        self.began = False
        """Whether a request began in the current read."""
        self.fed = False
        """Whether the current read brought body bytes (or ended a head)."""
        self.head_size = 0
        """Bytes of the current head read so far (bounded by MAX_HEAD)."""
        self.framing = 0
        """Bytes of chunked framing since the last body byte (bounded by MAX_FRAMING)."""
        self.refusal = REFUSED_PIPELINED
        """What the 400 of a refused request says."""
        self._linger: asyncio.TimerHandle | None = None
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
            return  # parsing has stopped; reading is paused, and these bytes are aiohttp's
        parser = self.parser
        if parser is None:
            return  # the connection was lost
        self.ended_in_read = self.began = self.fed = False
        try:
            parser.feed_data(data)
        except (_HandOff, httptools.HttpParserError) as exc:
            self.fresh = None
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
        if not self.in_message:
            self.raw, self.keeping, self.whole = [], True, True
        elif self.in_head:
            # llhttp buffers a header until it is whole, so the callbacks alone cannot bound
            # a head that never ends: a read that began inside the head counts whole; the
            # read the head began in counts what its callbacks saw (not the requests before
            # it, nor the end of the head that was open when the read began).
            if not self.began:
                self.head_size += len(data)
            if self.head_size > MAX_HEAD:
                self.unparseable(_TooLarge("request head too large"))
        elif self.current is not None:
            # The same for a chunked body's framing: a read without a body byte counts
            # whole; one with a body byte (or the head's end) starts the count again.
            self.framing = 0 if self.fed else self.framing + len(data)
            if self.framing > MAX_FRAMING:
                self.unparseable(_TooLarge("chunk framing or trailer too large"))
            else:
                self.current.body.watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self.parser = None
        self.front.clients.leave(self)
        if self._linger is not None:
            self._linger.cancel()
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
        self.in_message = self.in_head = self.began = True
        if self.ended_in_read:
            self.whole = False
        self.url, self.header_list, self.head_size, self.longest_field = [], [], 0, 0

    def on_url(self, url: bytes) -> None:
        self.url.append(url)
        if self.began:
            self.head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.current is None:  # else a chunked body's trailer: not relayed
            # text() inline: a call less per name and value of every request.
            self.header_list.append(
                (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
            )
            self.longest_field = max(self.longest_field, len(name), len(value))
            if self.began:
                self.head_size += len(name) + len(value)

    def on_headers_complete(self) -> None:
        arrived = time.monotonic()
        self.in_head = False
        self.fed = True
        self.framing = 0
        parser = self.parser
        assert parser is not None  # a callback of its own feed_data
        target = text(b"".join(self.url))
        request = FrontRequest(
            self,
            parser.get_method().decode("ascii", "surrogateescape"),
            target,
            CIMultiDict(self.header_list),
            self.remote,
            arrived,
            parser.should_keep_alive() and not self.front.closing,
        )
        request.longest_field = self.longest_field
        if not self.front.rule.serves(parser.get_http_version(), request, target):
            self.pending = "hand-off" if self.whole else "refuse"
            raise _HandOff
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
        self.fed = True
        if self.current is not None:
            self.current.body.feed(body)

    def on_message_complete(self) -> None:
        request = self.current
        if request is not None:
            request.body.feed_eof()
            self.current = None
            front = self.front
            sent = request is self.fresh and send_on_arrival(front.pool, front.tap.target, request)
            if sent and front.debug:  # not even a filtered call otherwise: it runs per request
                log.debug("sent_on_arrival", path=request.rel_url.raw_path)
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self.in_message = False
        self.ended_in_read = True

    # -- exchanges ----------------------------------------------------------------------

    def handing_off(self) -> bool:
        """Whether a request was found to be aiohttp's (set inside the parser's callback,
        which the type checker cannot see through)."""
        return self.pending is not None

    def start(self, request: FrontRequest) -> None:
        self.front.clients.wake(self)
        self.task = asyncio.get_running_loop().create_task(self.serve(request))

    async def serve(self, request: FrontRequest) -> None:
        transport, front = self.transport, self.front
        try:
            self.relay = Http1Relay(front.tap, front.pool, self, request)
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
            # body is read and dropped for up to LINGER_SECONDS, as aiohttp's server does,
            # keeping the connection if it ends in time.
            request.body.discard()
            self._linger = asyncio.get_running_loop().call_later(LINGER_SECONDS, self._lingered)
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
        else:
            self.front.clients.rest(self)

    def hand_off(self) -> None:
        """Give the connection, and every byte of the current request, to aiohttp."""
        self.front.clients.leave(self)
        self.parser = None
        transport, data = self.transport, b"".join(self.raw)
        self.raw = []
        handler = self.front.aiohttp_protocol()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self.flow.reading_paused:
            transport.resume_reading()
        if data:
            handler.data_received(data)

    def refuse(self) -> None:
        body = error_body("ollama", 400, self.refusal)
        self.transport.write(error_response(400, body, keep_alive=False))
        self.transport.close()

    def unparseable(self, exc: Exception) -> None:
        """Bytes llhttp refuses, or a head or framing past its bound. Between requests,
        reading stops, and what came before is answered first: then aiohttp's server
        answers them (400) if they begin a request it can be given, else the front's 400
        closes the connection (as nginx and aiohttp answer bytes behind a request in the
        same read). Inside a body, the connection is cut."""
        error = str(exc) or type(exc).__name__
        if self.current is None:
            if self.whole:
                self.pending = "hand-off"
            else:
                log.info("front_unparseable", error=error)
                self.pending, self.refusal = "refuse", unparseable_after(error)
            if self.task is None:
                self.after_exchange(keep=True)
            else:
                self.pause_reading()
            return
        log.info("front_unparseable", error=error)
        self.current.body.fail(ClientGone(f"the request could not be parsed: {error}"))
        self.transport.abort()

    def _lingered(self) -> None:
        """The dropped rest of an upload did not end in time: the connection goes."""
        self._linger = None
        if self.current is not None and self.task is None:
            self.transport.abort()

    def body_idle(self) -> None:
        self.front.body_timeouts += 1
        self.transport.abort()

    def close_if_idle(self) -> None:
        if self.task is None and self.current is None:
            self.transport.close()

    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        if len(self.queue) < MAX_QUEUED:
            self.flow.resume_reading()

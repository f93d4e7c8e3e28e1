"""One exchange through the fast relay: the aiohttp handler sends the request and the reply's
head; the body is relayed to the client from the upstream socket's callback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Final, Protocol

import structlog
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy import ollama
from proxy.exchange import Exchange, Outcome
from proxy.fastrelay import wire
from proxy.fastrelay.connection import UpstreamConnection
from proxy.fastrelay.errors import UpstreamGone
from proxy.fastrelay.pool import UpstreamPool
from proxy.fastrelay.reply import Reply
from proxy.forward import Forwarder, _Relay

log = structlog.get_logger("ollama_tap.fastrelay")

_IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""Methods that may be sent again when a reused connection turns out dead (RFC 9112 §9.3.1)."""


class Drainable(Protocol):
    """What waits for a full client socket to drain: aiohttp's writer, or the front's
    connection."""

    async def drain(self) -> None: ...


class FastRelay(_Relay):
    """The relay of `forward._Relay` with its own upstream client.

    Guarantees are those of the aiohttp relay (bytes, headers, outcomes, hooks and their
    order); what changes is the cost per chunk: each body piece is written to the client,
    read and stamped inside the upstream socket's `data_received`. Back-pressure: when the
    client's socket buffer is full the upstream socket stops being read until it drains.
    """

    def __init__(
        self, fwd: Forwarder, request: web.Request, ex: Exchange, pool: UpstreamPool
    ) -> None:
        super().__init__(fwd, request, ex)
        self.pool = pool
        self.conn: UpstreamConnection | None = None
        self.reply: Reply | None = None
        self.uploading: asyncio.Task[None] | None = None
        self.reader: ollama.Reader | None = None
        self.client: asyncio.Transport | None = None
        self.chunked = False
        self.gone = False
        self.held = False
        self.bug: Exception | None = None
        self._wake: asyncio.Future[None] | None = None

    # -- the exchange -------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        try:
            data = await self.upload()
            try:
                reply = await self.send(data)
            except (ConnectionError, TimeoutError, OSError) as exc:
                self.stop_upstream()
                if self.client_gone():
                    self.finish(Outcome.CLIENT_DISCONNECTED)
                    return web.Response(status=499)
                return await self.unreachable(exc, isinstance(exc, UpstreamGone))
            return await self.relay_reply(reply)
        finally:
            self.stop_upstream()
            if self.reply is not None:
                self.reply.detach()
            self.bug = None  # raised by now: its traceback's frames hold this relay

    async def send(self, data: bytes | AsyncIterator[bytes] | None) -> Reply:
        """Write the request on a pooled connection and wait for the reply's head.

        A reused connection that dies before answering is retried once on a fresh one for
        idempotent requests whose body is at hand, as aiohttp's client does.
        """
        request = self.request
        streamed = data is not None and not isinstance(data, bytes)
        body = data if isinstance(data, bytes) else None
        retry = request.method in _IDEMPOTENT and not streamed
        reply = self.adopt_sent()
        while True:
            if reply is None:
                head, chunked = wire.upstream_head(
                    request.method,
                    self.fwd.target_path(request),
                    request.headers.items(),
                    self.fwd.upstream_host,
                    body,
                    streamed,
                )
                conn = self.conn = await self.pool.acquire()
                reply = self.reply = conn.send(
                    head + (body or b""), request.method == "HEAD", not streamed
                )
                if streamed:
                    self.uploading = asyncio.create_task(self.stream_up(conn, data, chunked))  # type: ignore[arg-type]
            reply.on_head = self.head_arrived
            if not streamed:
                # The whole request is on its way: parse it and tell the observers while
                # Ollama works. Scheduled rather than called: requests that arrived together
                # are all sent before any of them is parsed (each one's TTFT waits for the
                # others' sends only). Idempotent: the reply's head or the end fire it first
                # if they come first, as they often do when Ollama answers at once (the
                # kernel runs it on this core the moment the request is written).
                asyncio.get_running_loop().call_soon(self.fire_request)
            try:
                await reply.head
            except UpstreamGone:
                if not (retry and reply.conn.uses > 1 and not reply.received):
                    raise
                reply.detach()
                retry, reply = False, None
                continue
            return reply

    def adopt_sent(self) -> Reply | None:
        """The reply to this request if it was sent before the relay existed (the front sends
        a request whose body is at hand from the socket callback it arrived in)."""
        return None

    def head_arrived(self) -> None:
        """The reply's head was parsed (inside the upstream socket's callback). This relay
        answers through aiohttp's response, whose head is written from the handler: it
        waits for the task. The front's relay begins its reply right here."""

    async def stream_up(
        self, conn: UpstreamConnection, chunks: AsyncIterator[bytes], chunked: bool
    ) -> None:
        """Relay a request body as it streams in; a failure on either side closes the
        upstream connection, which ends the reply (or the wait for it)."""
        try:
            async for data in chunks:
                if data:
                    conn.write(b"".join(wire.chunk_frames(data)) if chunked else data)
                    await conn.drain()
            if chunked:
                conn.write(wire.LAST_CHUNK)
        except Exception as exc:
            log.debug("upload_failed", id=self.ex.id, error=repr(exc))
            conn.abort()
            return
        conn.finish_request()

    async def relay_reply(self, reply: Reply) -> web.StreamResponse:
        headers = CIMultiDictProxy(CIMultiDict(reply.headers))
        # The head's own arrival, not this task's turn (a loop turn later).
        resp, self.reader = self.begin_reply(reply.status, reply.reason, headers, reply.arrived)
        try:
            writer = await resp.prepare(self.request)
            assert writer is not None  # a fresh response is always prepared
            self.client = self.request.transport
            self.chunked = resp.headers.get(hdrs.TRANSFER_ENCODING) == "chunked"
            reply.attach(self)
            await self.pump(reply, writer)
        except ConnectionResetError:
            self.finish(Outcome.CLIENT_DISCONNECTED)
            return resp
        if self.bug is not None:
            raise self.bug
        if self.gone:
            self.finish(Outcome.CLIENT_DISCONNECTED)
            return resp
        return await self.end_reply(resp, self.reader, reply.error)

    async def pump(self, reply: Reply, writer: Drainable) -> None:
        """Sleep until the reply ends, waking only to let a full client socket drain."""
        loop = asyncio.get_running_loop()
        while not (reply.ended or self.gone):
            if self.held:
                await writer.drain()
                self.held = False
                if self.conn is not None:
                    self.conn.resume_reading()
                continue
            self._wake = loop.create_future()
            await self._wake

    # -- the reply's sink: inside the upstream socket's data_received; never raises or blocks

    def reply_body(self, data: bytes) -> None:
        client = self.client
        if client is None or client.is_closing():
            self.client_left()
            return
        try:
            at = self.write_body(client, data)  # first: the front's relay makes the reader then
            self.read_piece(self.reader, data, at)
        except Exception as exc:
            # A bug of ours must not escape into the event loop's socket callback: the
            # handler re-raises it and the exchange ends as `proxy_error`.
            self.bug = exc
            self.stop_upstream()
            self.wake()
            return
        reply = self.reply
        if (
            self.client_full()
            and not self.held
            and not (reply is not None and reply.ended)  # its connection may serve another
        ):
            self.held = True
            if self.conn is not None:
                self.conn.pause_reading()
            self.wake()

    def client_full(self) -> bool:
        """The client's socket buffer is above its high-water mark."""
        return bool(self.request.protocol.writing_paused)

    def write_body(self, client: asyncio.Transport, data: bytes) -> float:
        """Write a body piece to the client; the monotonic time it was written."""
        if self.chunked:
            client.writelines(wire.chunk_frames(data))
        else:
            client.write(data)
        return time.monotonic()

    def reply_end(self) -> None:
        """The reply ended: complete, or with `Reply.error` set."""
        self.wake()

    def client_left(self) -> None:
        """The client went away mid-reply: close the upstream now so Ollama stops."""
        self.gone = True
        self.stop_upstream()
        self.wake()

    def wake(self) -> None:
        waiter, self._wake = self._wake, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- ending -------------------------------------------------------------------------

    def stop_upstream(self) -> None:
        """Stop the upload and close the upstream connection unless it ended clean."""
        if self.uploading is not None and not self.uploading.done():
            self.uploading.cancel()
            if self.conn is not None:
                self.conn.abort()
        if self.reply is not None and not self.reply.ended:
            self.reply.abandon()

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        self.stop_upstream()
        super().finish(outcome, at)

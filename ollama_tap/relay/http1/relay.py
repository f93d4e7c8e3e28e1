"""One exchange through the HTTP/1 transport: the request sent on a pooled connection (or
adopted, when it was sent on arrival), the reply relayed from the upstream socket's callback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

import structlog
from multidict import CIMultiDict, CIMultiDictProxy

from ollama_tap.exchange import Outcome
from ollama_tap.relay.failures import UpstreamGone, no_reply
from ollama_tap.relay.headers import LAST_CHUNK, chunk_frames, error_response, response_head
from ollama_tap.relay.http1.flow import FlowControl, Waiter
from ollama_tap.relay.http1.pool import UpstreamConnection, UpstreamPool
from ollama_tap.relay.http1.reply import Link, Reply, ReplySink
from ollama_tap.relay.http1.request import FrontRequest
from ollama_tap.relay.http1.send import request_head
from ollama_tap.relay.retry import Upload, held_for_resend, retry_reason
from ollama_tap.relay.tap import Tap, Tapped

log = structlog.get_logger("ollama_tap.relay")


class Client(Protocol):
    """The client connection an exchange answers on (`server.FrontConnection`)."""

    transport: asyncio.Transport
    flow: FlowControl

    @property
    def closing(self) -> bool:
        """Whether the connection ends after this exchange (the proxy is shutting down)."""
        ...


class Http1Relay(ReplySink):
    """The relay of one exchange: the client's response written by the proxy itself.

    The head is what aiohttp's server would make of the same reply (`response_head`), taken
    inside the upstream socket's callback as soon as it is parsed and sent in the same
    write as the first body piece; each later piece is written, read and stamped in the
    callback that brought it. The task only waits for the end (and writes a head that came
    alone). Back-pressure: while the client's socket buffer is full, the upstream socket is
    not read.
    """

    def __init__(self, tap: Tap, pool: UpstreamPool, client: Client, request: FrontRequest) -> None:
        self.tapped = Tapped(tap, request)
        self.target = tap.target
        self.pool = pool
        self.request = request
        self.client_conn = client
        self.client = client.transport
        self.flow = client.flow
        self.conn: Link | None = None
        self.reply: Reply | None = None
        self.uploading: asyncio.Task[None] | None = None
        self.upload_failed = False
        self.resend = b""
        """The body bytes a second send writes first (a streamed upload's so far)."""
        self.head = b""
        self.chunked = False
        self.began = False
        self.announced = False
        self.head_sent = False
        self.gone = False
        self.held = False
        self.bug: Exception | None = None
        self._wake = Waiter()

    # -- the exchange (the driver's `Relay`) --------------------------------------------

    async def run(self) -> None:
        try:
            data = await self.tapped.upload()
            try:
                reply = await self.send(data)
            except (ConnectionError, TimeoutError, OSError) as exc:
                self.stop_upstream()
                if self.client.is_closing():
                    self.finish(Outcome.CLIENT_DISCONNECTED)
                    return
                status, message = no_reply(self.target.url, exc, isinstance(exc, UpstreamGone))
                # Before the reply, which most clients take as the end of their upload: the
                # record keeps what the request said (aiohttp's relay does the same).
                await self.tapped.read_rest()
                await self.proxy_error(status, message, Outcome.UPSTREAM_UNREACHABLE)
                return
            await self.relay_reply(reply)
        finally:
            self.stop_upstream()
            if self.reply is not None:
                self.reply.detach()
            self.bug = None  # raised by now: its traceback's frames hold this relay

    def reply_started(self) -> bool:
        return self.head_sent

    def abort_client(self) -> None:
        self.client.abort()

    async def proxy_error(self, status: int, message: str, outcome: Outcome) -> None:
        body = self.tapped.proxy_error(status, message)
        if not self.client.is_closing():
            keep = self.request.keep_alive and not self.client_conn.closing
            self.client.write(error_response(status, body, keep))
        self.finish(outcome)

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        if self.began:
            self.announce()  # the head came, but the client never got it
        self.stop_upstream()
        self.tapped.finish(outcome, at)

    # -- the request --------------------------------------------------------------------

    async def send(self, data: bytes | AsyncIterator[bytes] | None) -> Reply:
        """Write the request on a pooled connection and wait for the reply's head; once
        more, on a fresh connection, when a reused one dies first and relay/retry.py's rule
        allows it."""
        body = data if isinstance(data, bytes) else None
        upload = Upload(data) if data is not None and not isinstance(data, bytes) else None
        reply = self.adopt_sent()
        while True:
            if reply is None:
                reply = await self.write_request(body, upload)
            reply.on_head = self.head_arrived
            if upload is None:
                # The whole request is on its way: parse it and tell the observers while
                # Ollama works. Scheduled rather than called: requests that arrived together
                # are all sent before any of them is parsed. Idempotent: the reply's head or
                # the end fire it first if they come first, as they often do when Ollama
                # answers at once.
                asyncio.get_running_loop().call_soon(self.tapped.fire_request)
            try:
                await reply.head
            except UpstreamGone as exc:
                if not await self.may_resend(reply, exc, upload):
                    raise
                if upload is not None:
                    upload = Upload(upload.body, self.resend)
                reply = None
                continue
            return reply

    async def write_request(self, body: bytes | None, upload: Upload | None) -> Reply:
        """Send the request on a pooled connection (a fresh one when it is sent again); a
        streamed body follows from its own task."""
        request, resent = self.request, self.tapped.ex.retried is not None
        head, chunked = request_head(self.target, request, body, upload is not None)
        conn = await (self.pool.connect() if resent else self.pool.acquire())
        self.conn = conn
        reply = self.reply = conn.send(
            head + (body or b""), request.method == "HEAD", upload is None
        )
        if upload is not None:
            self.uploading = asyncio.create_task(self.stream_up(conn, upload, chunked))
        return reply

    async def may_resend(self, reply: Reply, exc: UpstreamGone, upload: Upload | None) -> bool:
        """Whether to send the request again: the rule (relay/retry.py), a client still
        there, an upload that failed on the upstream's side only and whose bytes so far
        are at hand (`resend`). Marks the exchange as retried."""
        ex = self.tapped.ex
        reason = retry_reason(ex, reply.conn.uses > 1, reply.received, exc.reset)
        if reason is None or self.client.is_closing() or self.upload_failed:
            return False
        reply.detach()
        uploading = self.uploading
        if upload is not None and uploading is not None:
            uploading.cancel()
            await asyncio.wait({uploading})
        resend = await held_for_resend(upload, self.tapped.sent_so_far)
        if resend is None:
            return False
        self.resend = resend
        ex.retried = reason
        log.debug("resent", id=ex.id, path=ex.path, reason=str(reason))
        return True

    def adopt_sent(self) -> Reply | None:
        """The reply to this request if it was sent on arrival (`send_on_arrival`)."""
        request = self.request
        reply, request.sent = request.sent, None
        if reply is not None:
            self.conn, self.reply = reply.conn, reply
        return reply

    async def stream_up(self, conn: UpstreamConnection, chunks: Upload, chunked: bool) -> None:
        """Relay a request body as it streams in; a failure on either side closes the
        upstream connection, which ends the reply (or the wait for it)."""
        try:
            async for data in chunks:
                if data:
                    conn.write(b"".join(chunk_frames(data)) if chunked else data)
                    await conn.drain()
            if chunked:
                conn.write(LAST_CHUNK)
        except Exception as exc:
            log.debug("upload_failed", id=self.tapped.ex.id, error=repr(exc))
            # A failure of the client's side (it left, its body did not parse) is no dead
            # connection: the request is not sent again.
            self.upload_failed = not isinstance(exc, UpstreamGone)
            conn.abort()
            return
        conn.finish_request()

    # -- the reply ----------------------------------------------------------------------

    def head_arrived(self) -> None:
        # Inside the upstream socket's callback: the head is answered and the body of the
        # same read relayed before this callback returns, a loop turn sooner than the task
        # would. A bug is kept for the task to raise (the exchange ends as `proxy_error`).
        reply = self.reply
        if self.tapped.ended or self.began or reply is None:
            return
        try:
            self.begin(reply)
        except Exception as exc:
            self.bug = exc
            self.stop_upstream()

    def begin(self, reply: Reply) -> None:
        """Make the client's response head from the reply's and take the body from here on;
        the head goes out with the first body piece (or alone, from the task, when the read
        that brought it carried none). The Exchange learns of the head once it is out, and
        `response_headers` fires then: nothing but the head's bytes delays the first token."""
        request = self.request
        self.head, self.chunked = response_head(
            reply.status, reply.reason, reply.headers, request.method, request.keep_alive
        )
        # Only a head taken whole counts: one that failed is never announced (the exchange
        # ends as `proxy_error` with the proxy's 500, which is not what the upstream said).
        self.began = True
        reply.attach(self)

    async def relay_reply(self, reply: Reply) -> None:
        if self.bug is None and not self.began:
            self.begin(reply)
        if self.bug is None and not self.head_sent and not self.gone:
            self.write_body(self.client, b"")
        await self.pump(reply)
        if self.bug is not None:
            raise self.bug
        if self.gone or (self.client.is_closing() and not self.delivered()):
            self.finish(*self.tapped.left(Outcome.CLIENT_DISCONNECTED))
            return
        if reply.error is not None:
            self.abort_client()  # cut as the upstream cut it: the client sees what it would
            self.finish(self.tapped.cut(reply.error))
            return
        at = time.monotonic()
        if self.chunked:
            self.client.write(LAST_CHUNK)
        # The duration ends with the last write, not after the reader's parse of a single
        # reply (up to the tee limit: a large embedding).
        self.tapped.close_reader(at)
        self.finish(self.tapped.outcome(), at)

    def delivered(self) -> bool:
        """The client has every byte of a complete reply (a chunked one ends only when the
        relay writes its last chunk, after this is asked)."""
        reply = self.reply
        return (
            self.head_sent
            and not self.chunked
            and reply is not None
            and reply.ended
            and reply.error is None
        )

    async def pump(self, reply: Reply) -> None:
        """Sleep until the reply ends, waking only to let a full client socket drain."""
        while not (reply.ended or self.gone):
            if self.held:
                await self.flow.drain()
                self.held = False
                if self.conn is not None:
                    self.conn.resume_reading()
                continue
            await self._wake.wait()

    # -- the reply's sink: inside the upstream socket's data_received; never raises or blocks

    def reply_body(self, data: bytes) -> None:
        client = self.client
        if client.is_closing():
            self.client_left()
            return
        try:
            at = self.write_body(client, data)
            self.tapped.read_piece(data, at)
        except Exception as exc:
            # A bug of ours must not escape into the event loop's socket callback: the
            # task re-raises it and the exchange ends as `proxy_error`.
            self.bug = exc
            self.stop_upstream()
            self._wake.wake()
            return
        reply = self.reply
        if (
            self.flow.writing_paused
            and not self.held
            and not (reply is not None and reply.ended)  # its connection may serve another
        ):
            self.held = True
            if self.conn is not None:
                self.conn.pause_reading()
            self._wake.wake()

    def reply_end(self) -> None:
        self._wake.wake()

    def write_body(self, client: asyncio.Transport, data: bytes) -> float:
        """Write a body piece (the head with the first); the monotonic time it was written."""
        if self.head_sent:
            # Every piece after the first (the per-token path): no head to join. An empty
            # piece must not become a chunk: "0\r\n\r\n" would end the reply.
            if self.chunked and data:
                client.writelines(chunk_frames(data))
            elif data:
                client.write(data)
            return time.monotonic()
        frames: tuple[bytes, ...] = (
            chunk_frames(data) if self.chunked and data else (data,) if data else ()
        )
        self.head_sent = True
        frames = (self.head, *frames)
        if len(frames) == 1:
            client.write(frames[0])
        else:
            client.writelines(frames)
        at = time.monotonic()  # before the observers run: their time is not the client's
        # The observers hear of the reply once its head is on its way, not before: when the
        # upstream answered within the loop turn that sent it the request, the request hook
        # has not run yet, and parsing the request for it would delay the first token.
        self.announce()
        return at

    def announce(self) -> None:
        """Fill the Exchange from the reply's head, once, and fire `request` (if not yet)
        and `response_headers`."""
        if not self.announced:
            self.announced = True
            reply = self.reply
            assert reply is not None
            headers = CIMultiDictProxy(CIMultiDict(reply.headers))
            self.tapped.reply_head(reply.status, headers, reply.arrived)
            self.tapped.announce()

    def client_left(self) -> None:
        """The client went away mid-reply: close the upstream now so Ollama stops."""
        self.gone = True
        self.stop_upstream()
        self._wake.wake()

    def stop_upstream(self) -> None:
        """Stop the upload and close the upstream connection unless it ended clean."""
        if self.uploading is not None and not self.uploading.done():
            self.uploading.cancel()
            if self.conn is not None:
                self.conn.abort()
        if self.reply is not None and not self.reply.ended:
            self.reply.abandon()

"""One exchange through the HTTP/1 transport: the request sent on a pooled connection (or
adopted, when it was sent on arrival), the reply relayed from the upstream socket's callback.
What happened is reported to the driver (relay/tap.py), which decides the rest."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import structlog
from multidict import CIMultiDict, CIMultiDictProxy

from ollama_tap.relay.bodies import Upload
from ollama_tap.relay.failures import UpstreamGone
from ollama_tap.relay.headers import (
    LAST_CHUNK,
    chunk_frames,
    error_response,
    interim_head,
    response_head,
)
from ollama_tap.relay.http1.flow import FlowControl, Waiter
from ollama_tap.relay.http1.pool import UpstreamConnection, UpstreamPool
from ollama_tap.relay.http1.reply import Link, Reply, ReplySink
from ollama_tap.relay.http1.request import FrontRequest
from ollama_tap.relay.http1.send import request_head
from ollama_tap.relay.tap import Fact, Report, Tap
from ollama_tap.relay.tapped import Stage

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

    The head (`response_head`) is made inside the upstream socket's callback as soon as it
    is parsed and sent in the same write as the first body piece; each later piece is
    written, read and stamped in the callback that brought it. The task only waits for the
    end (and writes a head that came alone). Back-pressure: while the client's socket
    buffer is full, the upstream socket is not read.
    """

    def __init__(
        self, tap: Tap, pools: dict[str, UpstreamPool], client: Client, request: FrontRequest
    ) -> None:
        self.tapped = tap.exchange(request)
        self.tap = tap
        self.target = tap.target
        self.pools = pools
        """Each box's pool, by name (one, unless several boxes are named)."""
        self.pool = pools[tap.boxes.first.name]
        self.request = request
        self.client_conn = client
        self.client = client.transport
        self.flow = client.flow
        self.conn: Link | None = None
        self.reply: Reply | None = None
        self.uploading: asyncio.Task[None] | None = None
        self.upload_failed = False
        self.head = b""
        self.chunked = False
        self.began = False
        """The client's head was made from the reply's (`begin`)."""
        self.head_written = False
        self.gone = False
        self.held = False
        self.bug: Exception | None = None
        self._wake = Waiter()

    # -- what the driver asks (tap.Transport) -------------------------------------------

    async def send(self, body: bytes | None, upload: Upload | None) -> None:
        """Write the request on a pooled connection (a fresh one when it is sent again), or
        adopt the one sent on arrival, and wait for the reply's head."""
        reply = self.adopt_sent() or await self.write_request(body, upload)
        reply.on_head = self.head_arrived
        reply.on_interim = self.interim_arrived
        self.interim_arrived()  # any that came before the relay adopted the reply
        if upload is None:
            # The whole request is on its way: parse it and tell the observers while
            # Ollama works. Scheduled rather than called: requests that arrived together
            # are all sent before any of them is parsed. Idempotent: the reply's head or
            # the end fire it first if they come first, as they often do when Ollama
            # answers at once.
            asyncio.get_running_loop().call_soon(self.tapped.fire_request)
        await reply.head

    async def drop_attempt(self) -> None:
        reply, uploading = self.reply, self.uploading
        if reply is not None:
            reply.detach()
        if uploading is not None and not uploading.done():
            uploading.cancel()
            await asyncio.wait({uploading})

    async def relay_reply(self) -> Report:
        reply = self.reply
        assert reply is not None  # `send` returned: its head came
        try:
            return await self.relay(reply)
        finally:
            self.stop_upstream()
            reply.detach()
            self.bug = None  # raised by now: its traceback's frames hold this relay

    def client_gone(self) -> bool:
        return self.client.is_closing()

    def head_sent(self) -> bool:
        return self.head_written

    def abort_client(self) -> None:
        self.client.abort()

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        if not self.client.is_closing():
            request = self.request
            keep = request.keep_alive and not self.client_conn.closing
            self.client.write(
                error_response(
                    status,
                    body,
                    keep_alive=keep,
                    version=request.version,
                    content_type=content_type,
                )
            )

    def aim(self, box: str) -> None:
        self.target, self.pool = self.tap.targets[box], self.pools[box]

    def release(self) -> None:
        if self.began:
            self.announce()  # the head came, but the client never got it
        self.stop_upstream()
        if self.reply is not None and self.reply.ended:
            self.reply.detach()

    # -- the request --------------------------------------------------------------------

    async def write_request(self, body: bytes | None, upload: Upload | None) -> Reply:
        """Send the request on a pooled connection (a fresh one when it is sent again); a
        streamed body follows from its own task."""
        ex = self.tapped.ex
        request, resent = self.request, ex.retried is not None
        head, chunked = request_head(
            self.target,
            request,
            body,
            streamed=upload is not None,
            rewritten=ex.reload_guard is not None,
        )
        conn = await (self.pool.connect() if resent else self.pool.acquire())
        self.conn = conn
        reply = self.reply = conn.send(
            head + (body or b""), head_only=request.method == "HEAD", complete=upload is None
        )
        if upload is not None:
            self.uploading = asyncio.create_task(self.stream_up(conn, upload, chunked=chunked))
        return reply

    def adopt_sent(self) -> Reply | None:
        """The reply to this request if it was sent on arrival (`send_on_arrival`)."""
        request = self.request
        reply, request.sent = request.sent, None
        if reply is not None:
            self.conn, self.reply = reply.conn, reply
        return reply

    async def stream_up(self, conn: UpstreamConnection, chunks: Upload, *, chunked: bool) -> None:
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

    def interim_arrived(self) -> None:
        """Interim replies go to an HTTP/1.1 client as they come (RFC 9110 §15.2 forbids
        them to an HTTP/1.0 one), always before the final head."""
        reply = self.reply
        if reply is None or not reply.interims:
            return
        interims, reply.interims = reply.interims, []
        if self.request.version == "1.1" and not self.began and not self.client.is_closing():
            for status, reason, headers in interims:
                self.client.write(interim_head(status, reason, headers))

    def head_arrived(self) -> None:
        # Inside the upstream socket's callback: the head is answered and the body of the
        # same read relayed before this callback returns, a loop turn sooner than the task
        # would. A bug is kept for the task to raise (the exchange ends as `proxy_error`).
        reply = self.reply
        if self.tapped.stage >= Stage.SETTLED or self.began or reply is None:
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
        self.head, self.chunked, until_close = response_head(
            reply.status,
            reply.reason,
            reply.headers,
            request.method,
            keep_alive=request.keep_alive,
            version=request.version,
        )
        if until_close:
            request.keep_alive = False  # the body's end is the connection's
        # Only a head taken whole counts: one that failed is never announced (the exchange
        # ends as `proxy_error` with the proxy's 500, which is not what the upstream said).
        self.began = True
        reply.attach(self)

    async def relay(self, reply: Reply) -> Report:
        if self.bug is None and not self.began:
            self.begin(reply)
        if self.bug is None and not self.head_written and not self.gone:
            self.write_body(self.client, b"")
        await self.pump(reply)
        if self.bug is not None:
            raise self.bug
        if self.gone or (self.client.is_closing() and not self.delivered()):
            return Report(Fact.CLIENT_LEFT)
        if reply.error is not None:
            return Report(Fact.UPSTREAM_CUT, error=reply.error)
        at = time.monotonic()
        if self.chunked:
            self.client.write(LAST_CHUNK)
        elif not self.request.keep_alive:
            self.client.close()  # a body framed by the close ends here (once written)
        return Report(Fact.REPLY_DONE, at=at)

    def delivered(self) -> bool:
        """The client has every byte of a complete reply (a chunked one ends only when the
        relay writes its last chunk, after this is asked)."""
        reply = self.reply
        return (
            self.head_written
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
        if self.head_written:
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
        self.head_written = True
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
        """Fill the Exchange from the reply's head, once: `request` (if not yet) and
        `response_headers` fire."""
        if self.tapped.stage < Stage.HEADERS:
            reply = self.reply
            assert reply is not None
            headers = CIMultiDictProxy(CIMultiDict(reply.headers))
            self.tapped.reply_head(reply.status, headers, reply.arrived)

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

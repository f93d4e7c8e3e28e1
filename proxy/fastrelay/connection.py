"""One keep-alive HTTP/1.1 connection to Ollama: requests out, replies parsed in callbacks."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from proxy.fastrelay.errors import UpstreamGone
from proxy.fastrelay.reply import Reply

if TYPE_CHECKING:
    from proxy.fastrelay.pool import UpstreamPool

_READ_TIMEOUT_MESSAGE = "Timeout on reading data from socket"


class UpstreamConnection(asyncio.Protocol):
    """A connection of the pool; serves one request at a time, then goes back to the pool."""

    def __init__(self, pool: UpstreamPool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.reply: Reply | None = None
        self.uses = 0
        self.idle_since = 0.0
        self.request_sent = False
        self._reading_paused = False
        self._writing_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        reply = self.reply
        if reply is None:
            # Bytes nobody asked for: the connection's framing can no longer be trusted.
            self.abort()
            return
        self._last_read = self.loop.time()
        reply.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.pool.forget(self)
        self._stop_timer()
        self._wake_writer(UpstreamGone("Ollama closed the connection"))
        reply, self.reply = self.reply, None
        if reply is not None:
            reply.lost(exc)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake_writer(None)

    # -- requests -----------------------------------------------------------------------

    def send(self, data: bytes, head_only: bool, complete: bool) -> Reply:
        """Write a request head (and its body when `complete`); the reply is read from now."""
        self.uses += 1
        self.request_sent = complete
        reply = self.reply = Reply(self, head_only)
        self.write(data)
        self._start_timer()
        return reply

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise UpstreamGone("Ollama closed the connection while the request was sent")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's send buffer is above its high-water mark."""
        if self._writing_paused:
            self._drain = self.loop.create_future()
            await self._drain
        if self.transport is None:
            raise UpstreamGone("Ollama closed the connection while the request was sent")

    def finish_request(self) -> None:
        """The request body was sent to its end; the connection may be reused."""
        self.request_sent = True
        if self.reply is not None and self.reply.ended:
            self.reply_ended(self.reply)

    def reply_ended(self, reply: Reply) -> None:
        """Back to the pool when the exchange left the connection clean, else closed."""
        self._stop_timer()
        if not reply.keep_alive:
            self.abort()
        elif self.request_sent and self.usable:
            self.reply = None
            self.resume_reading()
            self.pool.release(self)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self._last_read = self.loop.time()
            self.transport.resume_reading()

    # -- internals ----------------------------------------------------------------------

    def _wake_writer(self, error: BaseException | None) -> None:
        waiter, self._drain = self._drain, None
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def _start_timer(self) -> None:
        # One timer per request, re-armed lazily from the last read, rather than a timer
        # cancelled and re-created on every chunk.
        self._last_read = self.loop.time()
        if self.pool.read_timeout is not None:
            self._timer = self.loop.call_at(
                self._last_read + self.pool.read_timeout, self._check_timeout
            )

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_timeout(self) -> None:
        timeout = self.pool.read_timeout
        reply = self.reply
        if timeout is None or reply is None or reply.ended:
            return
        now = self.loop.time()
        if self._reading_paused:
            # A socket paused because the client reads slowly is not a silent upstream.
            self._last_read = now
        due = self._last_read + timeout
        if due > now:
            self._timer = self.loop.call_at(due, self._check_timeout)
            return
        self._timer = None
        reply.fail(TimeoutError(_READ_TIMEOUT_MESSAGE))

"""Keep-alive HTTP/1.1 connections to the one upstream, opened on demand and reused (no cap);
requests out, replies parsed in the socket's callbacks."""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import cast

from yarl import URL

from ollama_tap.relay.failures import READ_TIMEOUT_MESSAGE, UpstreamGone, UpstreamUnreachable
from ollama_tap.relay.headers import IDLE_SECONDS, idle_life
from ollama_tap.relay.http1.flow import FlowControl
from ollama_tap.relay.http1.reply import Reply


def _keep_alive(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if len(name) == 10 and name.lower() == "keep-alive":
            return value
    return None


class UpstreamConnection(asyncio.Protocol):
    """A connection of the pool; serves one request at a time, then goes back to the pool."""

    def __init__(self, pool: UpstreamPool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.flow = FlowControl()
        self.reply: Reply | None = None
        self.uses = 0
        self.idle_until = 0.0
        """Loop time after which this idle connection is closed rather than reused."""
        self.request_sent = False
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.flow.transport = self.transport

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
        self.flow.lost(UpstreamGone("Ollama closed the connection"))
        reply, self.reply = self.reply, None
        if reply is not None:
            reply.lost(exc)

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    # -- requests -----------------------------------------------------------------------

    def send(self, data: bytes, *, head_only: bool, complete: bool) -> Reply:
        """Write a request head (and its body when `complete`); the reply is read from now."""
        self.uses += 1
        self.request_sent = complete
        reply = self.reply = Reply(self, head_only=head_only)
        self.write(data)
        self._start_timer()
        return reply

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise UpstreamGone("Ollama closed the connection while the request was sent")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's send buffer is above its high-water mark."""
        await self.flow.drain()
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
            self.abort()  # `Connection: close`, or HTTP/1.0 without keep-alive
        elif self.request_sent and self.usable:
            life = idle_life(_keep_alive(reply.headers))
            if life <= 0:
                self.abort()
                return
            self.reply = None
            self.resume_reading()
            self.pool.release(self, life)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        if self.flow.reading_paused:
            self._last_read = self.loop.time()
            self.flow.resume_reading()

    # -- the read timeout ---------------------------------------------------------------

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
        if self.flow.reading_paused:
            # A socket paused because the client reads slowly is not a silent upstream.
            self._last_read = now
        due = self._last_read + timeout
        if due > now:
            self._timer = self.loop.call_at(due, self._check_timeout)
            return
        self._timer = None
        reply.fail(TimeoutError(READ_TIMEOUT_MESSAGE))


class UpstreamPool:
    """Connections to `url`. There is no cap: a cap would queue requests where nobody can
    see them; Ollama has its own queue and reports it."""

    def __init__(self, url: URL, connect_timeout: float, read_timeout: float | None) -> None:
        self.host = url.host or "127.0.0.1"
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: collections.deque[UpstreamConnection] = collections.deque()
        self._open: set[UpstreamConnection] = set()

    async def acquire(self) -> UpstreamConnection:
        """The most recently used live idle connection, else a new one."""
        return self.idle() or await self.connect()

    def idle(self) -> UpstreamConnection | None:
        """The most recently used live idle connection, if there is one."""
        while self._idle:
            conn = self._idle.pop()
            if conn.usable and conn.loop.time() < conn.idle_until:
                return conn
            conn.abort()
        return None

    def release(self, conn: UpstreamConnection, life: float = IDLE_SECONDS) -> None:
        """Keep `conn` for reuse for up to `life` seconds."""
        now = conn.loop.time()
        conn.idle_until = now + life
        self._idle.append(conn)
        while self._idle and self._idle[0].idle_until <= now:
            self._idle.popleft().abort()

    def forget(self, conn: UpstreamConnection) -> None:
        """A connection closed; a stale entry left among the idle ones is skipped later."""
        self._open.discard(conn)

    def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()

    async def connect(self) -> UpstreamConnection:
        """A new connection (what a request sent again goes on)."""
        # The messages are aiohttp's, as the app's own client reports a dead upstream.
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConnection(self, loop),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                )
        except TimeoutError:
            raise TimeoutError(f"Connection timeout to host {self._origin}") from None
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise UpstreamUnreachable(
                f"Cannot connect to host {self.host}:{self.port} ssl:default [{why}]"
            ) from exc
        self._open.add(conn)
        return conn

    @property
    def _origin(self) -> str:
        scheme = "https" if self.ssl else "http"
        return f"{scheme}://{self.host}:{self.port}"

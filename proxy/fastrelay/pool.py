"""Keep-alive connections to the one upstream, opened on demand and reused; no cap."""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import Final

from yarl import URL

from proxy.fastrelay.connection import UpstreamConnection
from proxy.fastrelay.errors import UpstreamUnreachable

IDLE_SECONDS: Final = 15.0
"""An idle connection older than this is closed, not reused (aiohttp's keep-alive timeout):
it may be closing at the upstream's end just as a request is written to it."""


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
        return self.idle() or await self._connect(asyncio.get_running_loop())

    def idle(self) -> UpstreamConnection | None:
        """The most recently used live idle connection, if there is one."""
        while self._idle:
            conn = self._idle.pop()
            if conn.usable and conn.loop.time() - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.abort()
        return None

    def release(self, conn: UpstreamConnection) -> None:
        now = conn.loop.time()
        conn.idle_since = now
        self._idle.append(conn)
        while self._idle and now - self._idle[0].idle_since >= IDLE_SECONDS:
            self._idle.popleft().abort()

    def forget(self, conn: UpstreamConnection) -> None:
        """A connection closed; a stale entry left among the idle ones is skipped later."""
        self._open.discard(conn)

    def close(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> UpstreamConnection:
        # The messages follow aiohttp's, so both relays report a dead upstream alike.
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

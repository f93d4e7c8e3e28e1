"""The HTTP/1 server's client connections as a whole: how many may stay open, which idle
ones are closed first when that is reached, and closing them all at shutdown.

A keep-alive connection that waits for its next request holds a file descriptor; enough
of them (or of half-sent heads) and the process can accept no one else. So at every new
connection past the cap the connections idle the longest are closed and the new client is
served. Those handed to aiohttp's server count, but are never idle: each answers its one
request and closes. When none is idle (every connection is in an exchange, slow uploads
included), the new connection is closed at once, counted and logged: the descriptors left
are those the exchanges in flight need for Ollama, and a process that ran out of them
would fail accepts silently (uvloop's libuv closes what it cannot accept).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import heapq
import operator
import os
import resource
from collections.abc import Callable
from typing import Any, Final, Protocol

import structlog
from aiohttp import web

from ollama_tap.throttled import ThrottledLog

log = structlog.get_logger("ollama_tap.front")

KEEPALIVE_SECONDS: Final = 75.0
"""An idle keep-alive connection, or one whose next request head is still arriving, is
closed after this long (aiohttp's `run_app` default)."""
RESERVED_FDS: Final = 64
"""File descriptors kept for what is not a client connection: the listening sockets, the
database, the poller's and the log's."""
MIN_CAP: Final = 16
FD_CAP: Final = "fd_cap"
"""A refusal: the cap was reached and every connection was in an exchange."""
ACCEPT_FAILED: Final = "accept_failed"
"""A refusal: the event loop could not accept (out of descriptors; asyncio's loop says so,
uvloop's libuv closes such a connection without a word)."""
REFUSALS: Final = (FD_CAP, ACCEPT_FAILED)


def fd_cap() -> int:
    """Client connections kept open at most: half the descriptors left after RESERVED_FDS,
    the other half for their upstream connections (one per exchange in flight)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 2**31
    return max(MIN_CAP, (soft - RESERVED_FDS) // 2)


def raise_fd_limit() -> None:
    """Raise the soft limit on open files to the hard one, as Go's runtime does for every
    program (Ollama included): a default of 1,024 is a few hundred idle clients."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A hard limit the kernel refuses as a soft one (above nr_open) leaves it as it is.
    with contextlib.suppress(ValueError, OSError):
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Member(Protocol):
    """A client connection of the front (`server.FrontConnection`), as the set sees it."""

    transport: asyncio.Transport
    task: asyncio.Task[None] | None
    """The exchange running on it."""

    def close_if_idle(self) -> None: ...


class Clients:
    """The front's client connections, each idle one with its keep-alive timer."""

    def __init__(self) -> None:
        self.connections: set[Member] = set()
        self.idle: dict[Member, asyncio.TimerHandle] = {}
        """The idle connections, longest idle first (a dict keeps insertion order)."""
        self.closing = False
        self.cap = fd_cap()
        self.aiohttp: web.Server | None = None
        """aiohttp's server, for the connections handed to it."""
        self.refused = dict.fromkeys(REFUSALS, 0)
        """Connections not taken, by reason (`refuse`)."""
        self.said = ThrottledLog(log.warning, "connections_refused")

    def admit(self, conn: Member) -> None:
        """A new connection: idle from now; past the cap, the longest idle ones close, and
        with none idle the new one (`refuse`)."""
        self.connections.add(conn)
        aiohttp = self.aiohttp
        excess = len(self.connections) - self.cap
        if aiohttp is not None:
            excess += sum(1 for handler in aiohttp.connections if handler.transport is not None)
        if excess > 0 and self._shed(excess) < excess:
            self.leave(conn)
            conn.transport.abort()
            self.refuse(FD_CAP, cap=str(self.cap))
            return
        self.rest(conn)

    def refuse(self, reason: str, count: int = 1, **detail: str) -> None:
        """Connections the proxy did not take (REFUSALS): counted, for
        ollama_tap_connections_refused_total, and logged at most once a minute."""
        self.refused[reason] += count
        self.said.add(count, reason=reason, **detail)

    def rest(self, conn: Member) -> None:
        """The connection waits for its next request: its keep-alive timer runs."""
        self.wake(conn)
        loop = asyncio.get_running_loop()
        self.idle[conn] = loop.call_later(KEEPALIVE_SECONDS, conn.close_if_idle)

    def wake(self, conn: Member) -> None:
        """An exchange starts on the connection (or it leaves): no longer idle."""
        timer = self.idle.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def leave(self, conn: Member) -> None:
        self.wake(conn)
        self.connections.discard(conn)

    def _shed(self, excess: int) -> int:
        """Close the `excess` connections idle the longest (by when their keep-alive timer
        would close them), or as many as are idle; returns how many."""
        idle = [(timer.when(), conn) for conn, timer in self.idle.items()]
        shed = heapq.nsmallest(excess, idle, key=operator.itemgetter(0))
        for _, conn in shed:
            conn.transport.close()
            self.leave(conn)
        return len(shed)

    def hand_off(self, conn: Member, data: bytes, *, paused: bool) -> None:
        """Give `conn`'s socket, and the bytes of its current request, to aiohttp's server,
        which answers that one request with `Connection: close` (relay/__init__.py)."""
        self.leave(conn)
        assert self.aiohttp is not None, "Front.attach was not called"
        handler = self.aiohttp()
        transport = conn.transport
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if paused:
            transport.resume_reading()
        if data:
            handler.data_received(data)

    def close_idle(self) -> None:
        """Shutdown begins: connections without a running exchange close now (a request
        half-received included, as aiohttp does), busy ones after their exchange."""
        self.closing = True
        for conn in list(self.connections):
            conn.close_if_idle()

    async def wait_exchanges(self, within: float) -> None:
        """Until no exchange runs (one may start on a busy connection meanwhile), or
        `within` seconds passed (the driver has cancelled them all by then); then every
        connection left is closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while tasks := [c.task for c in self.connections if c.task is not None]:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(tasks, timeout=left)
        for conn in list(self.connections):
            conn.transport.abort()


ACCEPT_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""What asyncio's loop reports as an accept that failed for want of resources (it retries
the listening socket a second later)."""
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def accept_failures(clients: Clients, fallback: ExceptionHandler | None) -> ExceptionHandler:
    """The loop's exception handler: asyncio's loop reports each failed accept there, at
    every retry and for every socket of the backlog, as an ERROR with a traceback. Those
    are counted and logged at most once a minute (`Clients.refuse`); anything else goes to
    `fallback` (else the loop's default handler)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            isinstance(exc, OSError)
            and exc.errno in ACCEPT_ERRNOS
            and "accept" in str(context.get("message", ""))
        ):
            clients.refuse(ACCEPT_FAILED, error=os.strerror(exc.errno))
        elif fallback is not None:
            fallback(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle

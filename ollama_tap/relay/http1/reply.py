"""One upstream HTTP/1.1 response, parsed by llhttp (httptools) as its bytes arrive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import httptools

from ollama_tap.relay.failures import UpstreamGone
from ollama_tap.relay.headers import text


class Link(Protocol):
    """What a reply needs of the upstream connection it is read off (`pool.py`)."""

    loop: asyncio.AbstractEventLoop
    uses: int
    """Requests this connection has carried (a reused one may have been closed under us)."""

    def abort(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def reply_ended(self, reply: Reply) -> None: ...


class ReplySink:
    """Where a reply's body goes: called inside the upstream socket's callback, so neither
    method may raise or block. A base class rather than a Protocol so that compiled, the
    per-piece call is direct (docs/architecture.md, mypyc)."""

    def reply_body(self, data: bytes) -> None:
        raise NotImplementedError

    def reply_end(self) -> None:
        """The reply ended: complete, or with `Reply.error` set."""
        raise NotImplementedError


class Reply:
    """A response being read off an upstream connection.

    The head resolves `head`; body pieces go straight to the attached sink (or wait in
    `pending` until one is attached, with the socket paused); the end is reported once, as
    `ended` plus `error` (None when the reply was complete).
    """

    def __init__(self, conn: Link, *, head_only: bool) -> None:
        self.conn = conn
        self.head_only = head_only
        """A reply to HEAD: it ends with its head whatever its Content-Length says."""
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        """Dropped by `detach` once the reply ended: it holds this reply's methods, a cycle
        that only the garbage collector would otherwise break."""
        self.head: asyncio.Future[None] = conn.loop.create_future()
        self.status = 0
        self.arrived: float | None = None
        """Monotonic time the head was parsed (the Exchange's `response_started`)."""
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.sink: ReplySink | None = None
        self.on_head: Callable[[], None] | None = None
        """Called inside the socket callback once the head is parsed, before any body byte
        is handed on: a relay that can begin its reply there (attach a sink, write) saves
        the loop turn of waking the task that awaits `head`. Must not raise."""
        self.interims: list[tuple[int, str, list[tuple[str, str]]]] = []
        """Interim (1xx) replies before the final one, until the relay passes them on."""
        self.on_interim: Callable[[], None] | None = None
        """Called inside the socket callback when an interim reply joined `interims`."""
        self.pending: list[bytes] = []
        self.received = False
        """Some byte of the reply arrived (a request that got one is never retried)."""
        self.interim = False
        self.until_close = False
        self.ended = False
        self.keep_alive = False
        self.error: BaseException | None = None

    def feed(self, data: bytes) -> None:
        self.received = True
        parser = self.parser
        if parser is None:
            # Bytes after a reply that ended and was detached: the connection's framing
            # can no longer be trusted.
            self.conn.abort()
            return
        try:
            parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.fail(UpstreamGone(f"Ollama sent an invalid HTTP reply: {exc}"))
        self._flush()

    # -- llhttp callbacks ---------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        # Called once per read the status line spans: the pieces add up.
        self.reason += text(reason)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head.done():
            return  # a chunked reply's trailer: not part of the head that was relayed
        # text() inline: a call less per name and value of every reply.
        self.headers.append(
            (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        )

    def on_headers_complete(self) -> None:
        parser = self._parser()
        status = parser.get_status_code()
        if status < 200:
            # Passed on as Caddy does (103 Early Hints, 102 Processing), but for 100
            # Continue: the proxy met the client's expectation itself and asked none of
            # the upstream (headers.NOT_UPSTREAM), so one from it answers nobody.
            if status != 100:
                self.interims.append((status, self.reason, self.headers))
                if self.on_interim is not None:
                    self.on_interim()
            self.interim, self.headers, self.reason = True, [], ""
            return
        self.status = status
        self.arrived = time.monotonic()
        self.until_close = self._reads_until_close()
        self.head.set_result(None)
        if self.on_head is not None:
            self.on_head()
        if self.head_only:
            self._end(None, parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self.ended:
            return
        # Collected, not relayed one by one: a read that carries many HTTP chunks (a burst
        # of tokens) becomes one write to the client, as aiohttp's reader would make it.
        self.pending.append(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self._end(None, self._parser().should_keep_alive())

    # -- the relay's side ---------------------------------------------------------------

    def attach(self, sink: ReplySink) -> None:
        """Send the body (what already arrived first) to `sink` from now on."""
        self.sink = sink
        self._flush()
        if not self.ended:  # once ended, the connection may already serve another reply
            self.conn.resume_reading()

    def detach(self) -> None:
        """The relay is done with this reply: the references that make cycles with it (the
        relay's callbacks; the parser's, once the reply ended) are dropped, so an exchange
        is freed when it ends rather than by the next garbage collection (which then
        stalls every stream for the time it takes to walk them all)."""
        self.sink = self.on_head = self.on_interim = None
        if self.ended:
            self.parser = None
        if self.error is not None:
            self.error.__traceback__ = None  # its frames hold the relay, which holds this

    def abandon(self) -> None:
        """Stop reading: the connection is closed at once (how Ollama learns to stop)."""
        self.sink, self.pending = None, []
        self.fail(UpstreamGone("the reply was abandoned"))

    def drop(self) -> None:
        """Abandon a reply nobody will await (sent, never adopted): its head's exception is
        taken here, so asyncio does not report it as never retrieved."""
        self.abandon()
        if not self.head.cancelled():
            self.head.exception()
        self.detach()

    def fail(self, error: BaseException) -> None:
        self._end(error, False)
        self.conn.abort()

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed; a reply framed by the close ends well when it closed
        cleanly, and any other (or one cut by a reset) is cut."""
        if self.head.done() and self.until_close and exc is None:
            self._end(None, False)
            return
        where = "in the middle of its reply" if self.head.done() else "before answering"
        error = UpstreamGone(
            f"Ollama closed the connection {where}",
            unanswered=not self.received,
            reset=exc is not None,
            reused=self.conn.uses > 1,
        )
        self._end(error, False)

    def _end(self, error: BaseException | None, keep_alive: bool) -> None:
        if self.ended:
            return
        self.ended, self.error, self.keep_alive = True, error, keep_alive and error is None
        if not self.head.done():
            self.head.set_exception(error or UpstreamGone("Ollama sent no reply"))
        self._flush()
        self.conn.reply_ended(self)
        if self.sink is not None:
            self.sink.reply_end()

    def _flush(self) -> None:
        """Hand what the last read brought to the sink, or hold the socket until one is
        attached (the relay has not begun the client's response yet)."""
        if not self.pending:
            return
        if self.sink is None:
            if not self.ended:
                self.conn.pause_reading()
            return
        pending, self.pending = self.pending, []
        self.sink.reply_body(pending[0] if len(pending) == 1 else b"".join(pending))

    def _parser(self) -> httptools.HttpResponseParser:
        # Only its callbacks call this, and they run inside `feed`, which has a parser.
        assert self.parser is not None
        return self.parser

    def _reads_until_close(self) -> bool:
        """No length and not chunked: the body runs until the upstream closes (RFC 9112 §6.3)."""
        if self.head_only or self.status in (204, 304):
            return False
        names = {name.lower(): value for name, value in self.headers}
        framed = "content-length" in names or "chunked" in names.get("transfer-encoding", "")
        return not framed

"""One upstream HTTP/1.1 response, parsed by llhttp (httptools) as its bytes arrive."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import httptools

from proxy.fastrelay.wire import text

if TYPE_CHECKING:
    from proxy.fastrelay.connection import UpstreamConnection


class UpstreamGone(ConnectionError):
    """The upstream closed, broke or garbled the connection before its reply was complete."""


class ReplySink(Protocol):
    """Where a reply's body goes; both methods run inside the socket callback and must not
    raise or block."""

    def reply_body(self, data: bytes, raw: bytes | None) -> None:
        """`data`: the body bytes a read brought (de-chunked); `raw`: the same read's bytes as
        they came off the wire, chunk framing included, when the reply passes through as is
        (`Reply.passthrough`), else None."""

    def reply_end(self) -> None:
        """The reply ended: complete, or with `Reply.error` set."""


class Reply:
    """A response being read off an `UpstreamConnection`.

    The head resolves `head`; body pieces go straight to the attached sink (or wait in
    `pending` until one is attached, with the socket paused); the end is reported once, as
    `ended` plus `error` (None when the reply was complete).
    """

    def __init__(self, conn: UpstreamConnection, head_only: bool) -> None:
        self.conn = conn
        self.head_only = head_only
        """A reply to HEAD: it ends with its head whatever its Content-Length says."""
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[None] = conn.loop.create_future()
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.sink: ReplySink | None = None
        self.pending: list[bytes] = []
        self.received = False
        """Some byte of the reply arrived (a request that got one is never retried)."""
        self.interim = False
        self.until_close = False
        self.ended = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.passthrough = False
        """A chunked reply whose wire bytes after the head are relayed as they are (chunk
        framing and terminator included), so the client sees Ollama's own chunks."""
        self.raw: list[bytes] = []
        # Bytes until the final head is complete, to find where its body starts.
        self._head_bytes: bytearray | None = bytearray()
        self._interim_seen = False

    def feed(self, data: bytes) -> None:
        self.received = True
        if self._head_bytes is not None:
            self._head_bytes += data
        elif self.passthrough:
            self.raw.append(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.fail(UpstreamGone(f"Ollama sent an invalid HTTP reply: {exc}"))
        self._flush()

    # -- llhttp callbacks ---------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason = text(reason)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head.done():
            return  # a chunked reply's trailer: not part of the head that was relayed
        self.headers.append((text(name), text(value)))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            # 100 Continue and friends: skipped, as aiohttp's client skips them.
            self.interim, self.headers, self._interim_seen = True, [], True
            return
        self.status = status
        self.until_close = self._reads_until_close()
        self._start_passthrough()
        self.head.set_result(None)
        if self.head_only:
            self._end(None, self.parser.should_keep_alive())

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
        self._end(None, self.parser.should_keep_alive())

    # -- the relay's side ---------------------------------------------------------------

    def attach(self, sink: ReplySink) -> None:
        """Send the body (what already arrived first) to `sink` from now on."""
        self.sink = sink
        self._flush()
        if not self.ended:  # once ended, the connection may already serve another reply
            self.conn.resume_reading()

    def abandon(self) -> None:
        """Stop reading: the connection is closed at once (how Ollama learns to stop)."""
        self.sink, self.pending, self.raw = None, [], []
        self.fail(UpstreamGone("the reply was abandoned"))

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
        self._end(UpstreamGone(f"Ollama closed the connection {where}"), False)

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
        attached (the handler is still preparing the client's response)."""
        if not (self.pending or self.raw):
            return
        if self.sink is None:
            if not self.ended:
                self.conn.pause_reading()
            return
        pending, self.pending = self.pending, []
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        if not self.passthrough:
            self.sink.reply_body(data, None)
            return
        raw, self.raw = self.raw, []
        self.sink.reply_body(data, raw[0] if len(raw) == 1 else b"".join(raw))

    def _start_passthrough(self) -> None:
        """A chunked final reply, no interim one before it: its body goes out as it came.

        The head ends at the first CRLFCRLF of the stream (header lines cannot hold one);
        what follows in the bytes read so far is the start of the body."""
        head, self._head_bytes = self._head_bytes, None
        if head is None or self._interim_seen or self.head_only or self.status in (204, 304):
            return
        te = [v for k, v in self.headers if k.lower() == "transfer-encoding"]
        end = head.find(b"\r\n\r\n")
        if te == ["chunked"] and end >= 0:
            self.passthrough = True
            self.raw.append(bytes(head[end + 4 :]))

    def _reads_until_close(self) -> bool:
        """No length and not chunked: the body runs until the upstream closes (RFC 9112 §6.3)."""
        if self.head_only or self.status in (204, 304):
            return False
        names = {name.lower(): value for name, value in self.headers}
        framed = "content-length" in names or "chunked" in names.get("transfer-encoding", "")
        return not framed

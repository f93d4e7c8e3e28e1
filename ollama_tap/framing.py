"""NDJSON line and SSE event splitters over a byte stream that arrives in arbitrary pieces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_LINE: Final = 8 * 1024 * 1024
"""Bytes of one line (or SSE event) held while it arrives. A longer one is given up on: its
bytes are relayed as ever, but it is dropped unread up to its end and counted in `skipped`
(no Ollama line comes near it: a final object's `context` is some 7 bytes a token)."""


class _RawLines:
    """Splits at "\\n" and keeps a trailing "\\r", so callers can still count raw bytes.

    Only the new piece is ever searched: the carried tail holds no "\\n" by construction,
    so a line of several MB arriving in small pieces is scanned once, byte by byte. A line
    past `limit` is dropped up to its "\\n" (`skipping`) and counted in `skipped`.
    """

    __slots__ = ("_limit", "_tail", "skipped", "skipping")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._tail = bytearray()
        self._limit = limit
        self.skipping = False
        self.skipped = 0

    def feed(self, data: bytes) -> list[bytes]:
        # One pass in C; a piece without "\n" comes back as `data` itself, not a copy.
        lines = data.split(b"\n")
        rest = lines.pop()
        if self.skipping:
            if not lines:
                return lines
            del lines[0]  # the end of the line given up on
            self.skipping = False
        elif self._tail:
            if not lines:
                self._carry(rest)
                return lines
            self._tail += lines[0]
            lines[0] = self._take()
        if rest:
            self._carry(rest)
        return lines

    def _carry(self, rest: bytes) -> None:
        if len(self._tail) + len(rest) > self._limit:
            self._tail.clear()
            self.skipping = True
            self.skipped += 1
        else:
            self._tail += rest

    def flush(self) -> bytes | None:
        return self._take() if self._tail else None

    def _take(self) -> bytes:
        line = bytes(self._tail)
        self._tail.clear()
        return line


_CR = ord("\r")
"""An int: `_CR in data` is a memchr, many times cheaper than `b"\\r" in data`."""


def _chomp(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


class LineSplitter(_RawLines):
    """NDJSON framing: complete lines without their "\\n" (nor a "\\r" before it).

    Empty lines are returned as ``b""`` (Ollama never sends them; readers skip them).
    """

    __slots__ = ()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines completed by `data`; a partial last line is carried to the next call."""
        if not self._tail and data.endswith(b"\n") and _CR not in data and not self.skipping:
            # Nearly every read of a stream: whole lines, nothing carried in or out.
            lines = data.split(b"\n")
            lines.pop()
            return lines
        lines = super().feed(data)
        if _CR in data:
            return [_chomp(line) for line in lines]
        # Without "\r" in `data`, only a first line completing a carried "...\r" ends in one.
        if lines and lines[0].endswith(b"\r"):
            lines[0] = lines[0][:-1]
        return lines

    def flush(self) -> bytes | None:
        """The unterminated tail at EOF (a final line without "\\n"), or None if empty."""
        tail = super().flush()
        return (_chomp(tail) or None) if tail is not None else None


@dataclass(slots=True)
class SseEvent:
    """One dispatched server-sent event."""

    event: str | None
    """The `event:` field, None when the block had none."""
    data: bytes
    """The `data:` lines joined by "\\n" (as the SSE spec assembles them)."""
    nbytes: int
    """Raw size of the block on the wire, from its first line through the blank line."""


class SseSplitter:
    """SSE framing per the WHATWG rules, over bytes.

    Lines end in "\\n" or "\\r\\n" (a lone "\\r" is not treated as a line end: no server
    Ollama talks to sends one). A blank line dispatches the event if the block had at least
    one `data` line; comment lines (":") and `id`/`retry` fields are ignored but count in
    `nbytes`. One space after the field's colon is dropped. At EOF a pending event with data
    is dispatched although the blank line never came (lenient: clients do the same). An
    event past `limit` bytes is given up on up to its blank line, as a line is (MAX_LINE).
    """

    __slots__ = ("_data", "_dropped", "_event", "_limit", "_lines", "_nbytes", "_over")

    def __init__(self, limit: int = MAX_LINE) -> None:
        self._lines = _RawLines(limit)
        self._limit = limit
        self._dropped = 0
        self._reset()

    @property
    def skipped(self) -> int:
        """Lines and events given up on."""
        return self._lines.skipped + self._dropped

    def feed(self, data: bytes) -> list[SseEvent]:
        """The events completed by `data`."""
        events = []
        for raw in self._lines.feed(data):
            if event := self._line(raw, len(raw) + 1):
                events.append(event)
        return events

    def flush(self) -> list[SseEvent]:
        """At EOF: the event still pending (its blank line missing), if it had data."""
        tail = self._lines.flush()
        if tail is not None:
            self._line(tail, len(tail))
        pending = self._dispatch()
        return [pending] if pending else []

    def _reset(self) -> None:
        self._event: str | None = None
        self._data: list[bytes] | None = None
        self._nbytes = 0
        self._over = False

    def _line(self, raw: bytes, nbytes: int) -> SseEvent | None:
        self._nbytes += nbytes
        line = _chomp(raw)
        if not line:
            return self._dispatch()
        if self._nbytes <= self._limit:
            self._field(line)
        elif not self._over:
            self._over = True  # given up on: its blank line dispatches nothing
            self._data = None
            self._dropped += 1
        return None

    def _field(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if not name and colon:
            return
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            if self._data is None:
                self._data = []
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    def _dispatch(self) -> SseEvent | None:
        data, event, nbytes = self._data, self._event, self._nbytes
        self._reset()
        if data is None:
            return None
        return SseEvent(event, b"\n".join(data), nbytes)

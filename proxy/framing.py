"""NDJSON line and SSE event splitters over a byte stream that arrives in arbitrary pieces."""

from __future__ import annotations

from dataclasses import dataclass


class _RawLines:
    """Splits at "\\n" and keeps a trailing "\\r", so callers can still count raw bytes.

    Only the new piece is ever searched: the carried tail holds no "\\n" by construction,
    so a line of several MB arriving in small pieces is scanned once, byte by byte.
    """

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        nl = data.find(b"\n")
        if nl >= 0 and nl == len(data) - 1 and not self._tail:
            return [data[:nl]]  # one whole line, the usual piece of a token stream
        if nl < 0:
            self._tail += data
            return []
        lines = [self._join_tail(data[:nl])]
        start = nl + 1
        while (nl := data.find(b"\n", start)) >= 0:
            lines.append(data[start:nl])
            start = nl + 1
        self._tail += memoryview(data)[start:]
        return lines

    def flush(self) -> bytes | None:
        return self._take() if self._tail else None

    def _join_tail(self, head: bytes) -> bytes:
        if not self._tail:
            return head
        self._tail += head
        return self._take()

    def _take(self) -> bytes:
        line = bytes(self._tail)
        self._tail.clear()
        return line


def _chomp(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


class LineSplitter:
    """NDJSON framing: complete lines without their "\\n" (nor a "\\r" before it).

    Empty lines are returned as ``b""`` (Ollama never sends them; readers skip them).
    """

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines = _RawLines()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines completed by `data`; a partial last line is carried to the next call."""
        return [_chomp(line) for line in self._lines.feed(data)]

    def flush(self) -> bytes | None:
        """The unterminated tail at EOF (a final line without "\\n"), or None if empty."""
        tail = self._lines.flush()
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
    is dispatched although the blank line never came (lenient: clients do the same).
    """

    __slots__ = ("_data", "_event", "_lines", "_nbytes")

    def __init__(self) -> None:
        self._lines = _RawLines()
        self._reset()

    def feed(self, data: bytes) -> list[SseEvent]:
        """The events completed by `data`."""
        return self._events(self._lines.feed(data))

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

    def _events(self, lines: list[bytes]) -> list[SseEvent]:
        events = []
        for raw in lines:
            if event := self._line(raw, len(raw) + 1):
                events.append(event)
        return events

    def _line(self, raw: bytes, nbytes: int) -> SseEvent | None:
        self._nbytes += nbytes
        line = _chomp(raw)
        if not line:
            return self._dispatch()
        self._field(line)
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
        return SseEvent(event=event, data=b"\n".join(data), nbytes=nbytes)

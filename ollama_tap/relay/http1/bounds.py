"""What llhttp does not bound, counted by the front as it reads: a request head that never
ends, and a chunked body's framing (chunk-size lines, extensions, trailer fields) without a
body byte between them; and what a refused client may still send (`Linger`).

llhttp buffers a header until it is whole and shows framing to no callback, so the callbacks
alone cannot see either grow: every read is counted as well, by where parsing stood at its
end (relay/http1/server.py).
"""

from __future__ import annotations

import asyncio
from typing import Final

from ollama_tap.relay.headers import MAX_FIELD

MAX_HEAD: Final = 128 * 1024
"""Bytes of a request head past which parsing stops (llhttp has no limit of its own): the
request is refused (431), or the connection cut."""
MAX_FRAMING: Final = MAX_FIELD
"""Bytes of a chunked body's framing (chunk-size lines, extensions, trailer fields) in a row,
without a body byte between them, past which the connection is cut: llhttp bounds none of
them and httptools grows a trailer field by concatenation (aiohttp stops at 64 KiB too)."""

MAX_LINGER: Final = 1024 * 1024
"""Bytes read and dropped after a refusal before the connection is cut (nginx's lingering
close, bounded by bytes as well as time: a client still pushing an endless head gets a
reset, not a sink)."""


class Linger:
    """The close after a refusal, as nginx's lingering close: the answer written and the
    write side closed first, then whatever the client is still sending read and dropped (at
    most MAX_LINGER bytes; the connection's BodyClock bounds it by LINGER_SECONDS), until it
    closes its side. A plain close with unread bytes is a reset, which can take the answer
    away before the client reads it."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.dropped = 0

    def answer(self, refusal: bytes) -> bool:
        """Write the refusal and close the write side; False when the transport cannot
        close one side only (it is then closed whole, and there is nothing to linger on)."""
        transport = self.transport
        transport.write(refusal)
        if not transport.can_write_eof():
            transport.close()
            return False
        transport.write_eof()
        return True

    def drop(self, size: int) -> None:
        """`size` more bytes read after the refusal: past MAX_LINGER, the connection is cut."""
        self.dropped += size
        if self.dropped > MAX_LINGER:
            self.transport.abort()

    def cut(self, why: str) -> None:
        """The time bound ran out (BodyClock.linger)."""
        self.transport.abort()


class TooLarge(Exception):
    """The request head passed MAX_HEAD, or a body's framing MAX_FRAMING."""


class ReadBounds:
    """One connection's counts: the head being read, and the framing since the last body
    byte."""

    def __init__(self) -> None:
        self.began = False
        """Whether a request began in the current read."""
        self.fed = False
        """Whether the current read brought body bytes (or ended a head)."""
        self.head_size = 0
        """Bytes of the current head read so far (bounded by MAX_HEAD)."""
        self.framing = 0
        """Bytes of chunked framing since the last body byte (bounded by MAX_FRAMING)."""

    def read(self) -> None:
        """A read is about to be parsed."""
        self.began = self.fed = False

    def begin(self) -> None:
        """A request begins, in the current read."""
        self.began, self.head_size = True, 0

    def head_part(self, size: int) -> None:
        """A part of the head (the target, a name, a value) as its callback saw it."""
        if self.began:
            self.head_size += size

    def head_ended(self) -> None:
        self.fed, self.framing = True, 0

    def head_read(self, size: int) -> TooLarge | None:
        """A read of `size` bytes ended inside a head. One that began inside the head counts
        whole; the one the head began in counts what its callbacks saw (not the requests
        before it, nor the end of the head that was open when the read began)."""
        if not self.began:
            self.head_size += size
        return TooLarge("request head too large") if self.head_size > MAX_HEAD else None

    def body_read(self, size: int) -> TooLarge | None:
        """A read of `size` bytes ended inside a body. One without a body byte (nor the
        head's end) counts whole; one with a body byte starts the count again."""
        if self.fed:
            self.framing = 0
        else:
            self.framing += size
        if self.framing > MAX_FRAMING:
            return TooLarge("chunk framing or trailer too large")
        return None

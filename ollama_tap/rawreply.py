"""The reply body's bytes exactly as relayed, with when each read was written to the client:
what `replay serve` sends back byte for byte (full record mode only, docs/recording.md).

Blob layout (little-endian): a header ``<BI`` (format 1, count), then ``count`` float64
offsets in seconds from the request head, ``count`` uint64 end positions (the body byte
after each read), then the body. In flight a read costs its bytes plus 16 bytes.
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Any, Final

FORMAT: Final = 1
_HEADER: Final = struct.Struct("<BI")


class RawReply:
    """The relayed body, kept until it would pass `limit` bytes; then nothing (`dropped`)."""

    __slots__ = ("body", "dropped", "ends", "limit", "offsets")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.body = bytearray()
        self.offsets = array("d")
        """When each read was written (monotonic seconds, as the Exchange's times)."""
        self.ends = array("Q")
        self.dropped = False
        """The body passed `limit`: nothing raw is kept, the record says so."""

    def add(self, data: bytes, at: float) -> bool:
        """Keep one read; False once the body is over the limit (drop this tee)."""
        end = len(self.body) + len(data)
        if end > self.limit:
            self.dropped = True
            self.body = bytearray()
            self.offsets = array("d")
            self.ends = array("Q")
            return False
        self.body += data
        self.offsets.append(at)
        self.ends.append(end)
        return True

    def __len__(self) -> int:
        return len(self.offsets)

    def pack(self, started: float) -> bytes:
        """The blob, offsets counted from `started` (the request head)."""
        offsets = array("d", (at - started for at in self.offsets))
        ends = self.ends
        if sys.byteorder == "big":
            offsets.byteswap()
            ends = array("Q", ends)
            ends.byteswap()
        return b"".join((_HEADER.pack(FORMAT, len(offsets)), offsets, ends, self.body))


def unpack(blob: bytes) -> list[tuple[float, bytes]]:
    """The reads of a blob: (offset in seconds from the request head, bytes), in order."""
    version, count = _HEADER.unpack_from(blob)
    if version != FORMAT:
        raise ValueError(f"unknown raw reply format {version}")
    pos = _HEADER.size
    offsets, ends = array("d"), array("Q")
    for a in (offsets, ends):
        a.frombytes(blob[pos : pos + a.itemsize * count])
        if sys.byteorder == "big":
            a.byteswap()
        pos += a.itemsize * count
    reads: list[tuple[float, bytes]] = []
    start = 0
    for at, end in zip(offsets, ends, strict=True):
        reads.append((at, blob[pos + start : pos + end]))
        start = end
    return reads


def summary(raw: RawReply | None) -> dict[str, Any] | None:
    """What the record's document says of the raw reply: its size, or why none is kept."""
    if raw is None:
        return None
    if raw.dropped:
        return {"kept": False, "reason": f"the reply passed --reply-tee-limit ({raw.limit} bytes)"}
    return {"kept": True, "size": len(raw.body), "reads": len(raw)}

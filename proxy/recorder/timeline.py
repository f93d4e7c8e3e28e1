"""The chunk timeline of one exchange, built per chunk in O(1) and packed into one blob.

Blob layout (little-endian): a header ``<BBI`` (format 1, flags, count), then ``count``
float64 offsets in seconds from the request head, ``count`` uint8 kinds, ``count`` uint32
wire sizes (bytes of the line or event that carried the piece), and — only when flag
TEXT is set — ``count`` uint32 UTF-8 lengths followed by the concatenated text. A
10,000-token stream is one blob of about 170 kB with text, 130 kB without.
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Any, Final

from proxy.exchange import OutputChunk, OutputKind

FORMAT: Final = 1
TEXT: Final = 1
"""Flag: the pieces' text is stored (full mode)."""
TEXT_TRUNCATED: Final = 2
"""Flag: text stopped being kept past the cap; later pieces have offsets and sizes only."""
TEXT_CAP: Final = 1024 * 1024
_HEADER: Final = struct.Struct("<BBI")
KINDS: Final = tuple(OutputKind)
_KIND_CODE: Final = {kind: code for code, kind in enumerate(KINDS)}


def _le(a: array[Any]) -> bytes:
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


class Timeline:
    """Output pieces as they were relayed: offsets, kinds, sizes and (optionally) text."""

    __slots__ = ("flags", "kinds", "lengths", "nbytes", "offsets", "text")

    def __init__(self, *, keep_text: bool) -> None:
        self.flags = TEXT if keep_text else 0
        self.offsets = array("d")
        self.kinds = array("B")
        self.nbytes = array("I")
        self.lengths = array("I")
        # One growing buffer, not a bytes object per piece: a long stream held in flight
        # costs ~21 bytes per token instead of ~70.
        self.text = bytearray()

    def add(self, offset: float, piece: OutputChunk) -> None:
        self.offsets.append(offset)
        self.kinds.append(_KIND_CODE[piece.kind])
        self.nbytes.append(piece.nbytes)
        if not self.flags & TEXT:
            return
        text = piece.text.encode()
        if self.flags & TEXT_TRUNCATED or len(self.text) + len(text) > TEXT_CAP:
            self.flags |= TEXT_TRUNCATED
            text = b""
        self.lengths.append(len(text))
        self.text += text

    def __len__(self) -> int:
        return len(self.offsets)

    def pack(self) -> bytes:
        parts = [
            _HEADER.pack(FORMAT, self.flags, len(self.offsets)),
            _le(self.offsets),
            self.kinds.tobytes(),
            _le(self.nbytes),
        ]
        if self.flags & TEXT:
            parts += [_le(self.lengths), bytes(self.text)]
        return b"".join(parts)


def _read(blob: bytes, typecode: str, start: int, count: int) -> tuple[array[Any], int]:
    a = array(typecode)
    end = start + a.itemsize * count
    a.frombytes(blob[start:end])
    if sys.byteorder == "big":
        a.byteswap()
    return a, end


def unpack(blob: bytes) -> dict[str, Any]:
    """The timeline as plain lists: offsets (s), kinds, bytes, and texts when stored."""
    version, flags, count = _HEADER.unpack_from(blob)
    if version != FORMAT:
        raise ValueError(f"unknown timeline format {version}")
    offsets, pos = _read(blob, "d", _HEADER.size, count)
    kinds, pos = _read(blob, "B", pos, count)
    nbytes, pos = _read(blob, "I", pos, count)
    texts: list[str] | None = None
    if flags & TEXT:
        lengths, pos = _read(blob, "I", pos, count)
        texts = []
        for n in lengths:
            texts.append(blob[pos : pos + n].decode(errors="replace"))
            pos += n
    return {
        "offsets": offsets.tolist(),
        "kinds": [str(KINDS[k]) for k in kinds],
        "bytes": nbytes.tolist(),
        "texts": texts,
        "text_truncated": bool(flags & TEXT_TRUNCATED),
    }

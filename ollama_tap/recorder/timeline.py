"""The chunk timeline of one exchange, built per chunk in O(1) and packed into one blob.

Blob layout (little-endian): a header ``<BBI`` (format 1, flags, count), then ``count``
float64 offsets in seconds from the request head, ``count`` uint8 kinds, ``count`` uint32
wire sizes (bytes of the line or event that carried the piece), and — only when flag
TEXT is set — ``count`` uint32 UTF-8 lengths followed by the concatenated text. A
10,000-token stream is one blob of about 170 kB with text, 130 kB without; in flight it
holds about 10 bytes per piece plus the text (sizes and lengths as narrow as they fit,
kinds only once they differ), and packing widens them to the layout above.
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Any, Final

from ollama_tap.exchange import OutputChunk, OutputKind

FORMAT: Final = 1
TEXT: Final = 1
"""Flag: the pieces' text is stored (full mode)."""
TEXT_TRUNCATED: Final = 2
"""Flag: text stopped being kept past the cap; later pieces have offsets and sizes only."""
TEXT_CAP: Final = 1024 * 1024
_HEADER: Final = struct.Struct("<BBI")
KINDS: Final = tuple(OutputKind)
_KIND_CODE: Final = {kind: code for code, kind in enumerate(KINDS)}


def _le(a: array[Any]) -> bytes | array[Any]:
    """The array's items little-endian: the array itself (a buffer `bytes.join` takes
    without a copy) on little-endian machines."""
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
        return a.tobytes()
    return a


_WIDTHS: Final = ("B", "H", "I")
"""Unsigned type codes from narrow to wide; the blob stores "I"."""


def _widened(a: array[int], value: int) -> array[int]:
    """`a` copied into the narrowest wider type code that holds `value`, with it appended.

    Sizes and lengths are kept as narrow as their largest value while a stream is in
    flight (nearly every token fits in a byte): 2,000 held streams cost megabytes less.
    Past uint32 this raises OverflowError, as a uint32 array always did.
    """
    for code in _WIDTHS[_WIDTHS.index(a.typecode) + 1 :]:
        wider = array(code, a)
        try:
            wider.append(value)
        except OverflowError:
            continue
        return wider
    a.append(value)  # raises
    return a


def _uint32_le(a: array[int]) -> bytes | bytearray | array[int]:
    """The items of a "B", "H" or "I" array as little-endian uint32s."""
    if a.typecode == "I":
        return _le(a)
    if sys.byteorder == "big":
        return _le(array("I", a))
    # Byte i of every item into byte i of every uint32 (zeros above): C-speed slice copies
    # where array("I", a) converts item by item, 20× slower.
    out, raw, width = bytearray(4 * len(a)), a.tobytes(), a.itemsize
    for i in range(width):
        out[i::4] = raw[i::width]
    return out


class Timeline:
    """Output pieces as they were relayed: offsets, kinds, sizes and (optionally) text."""

    __slots__ = ("_kind", "_room", "flags", "kinds", "lengths", "nbytes", "offsets", "text")

    def __init__(self, *, keep_text: bool) -> None:
        self.flags = TEXT if keep_text else 0
        self.offsets = array("d")
        # While every piece has one kind (nearly every stream), that kind is all there is
        # to keep; the array of kinds exists from the first piece of another kind on.
        self._kind: OutputKind | None = None
        self.kinds: array[int] | None = None
        # Widened on the first value that does not fit (see _widened); packed as uint32.
        self.nbytes = array("B")
        self.lengths = array("B")
        # One growing buffer, not a bytes object per piece: a long stream held in flight
        # costs ~14 bytes per token plus its text instead of ~70.
        self.text = bytearray()
        # Text bytes still allowed under TEXT_CAP, -1 once a piece went past it (no later
        # piece keeps text), None when no text is kept: one test per piece for all three.
        self._room: int | None = TEXT_CAP if keep_text else None

    def add(self, offset: float, piece: OutputChunk) -> None:
        # Called for every token of every stream: comparing kinds by identity spares the
        # code lookup until the kind changes.
        self.offsets.append(offset)
        if self.kinds is not None:
            self.kinds.append(_KIND_CODE[piece.kind])
        elif piece.kind is not self._kind:
            self._new_kind(piece.kind)
        try:
            self.nbytes.append(piece.nbytes)
        except OverflowError:
            self.nbytes = _widened(self.nbytes, piece.nbytes)
        room = self._room
        if room is None:
            return
        text = piece.text.encode()
        if len(text) > room:
            self.flags |= TEXT_TRUNCATED
            self._room, text = -1, b""
        else:
            self._room = room - len(text)
        try:
            self.lengths.append(len(text))
        except OverflowError:
            self.lengths = _widened(self.lengths, len(text))
        self.text += text

    def _new_kind(self, kind: OutputKind) -> None:
        """A piece (already in `offsets`) whose kind differs from every earlier one's."""
        earlier = len(self.offsets) - 1
        if earlier:
            assert self._kind is not None
            self.kinds = array("B", [_KIND_CODE[self._kind]]) * earlier
            self.kinds.append(_KIND_CODE[kind])
        else:
            self._kind = kind

    def __len__(self) -> int:
        return len(self.offsets)

    def runs(self) -> list[tuple[OutputKind, str]] | None:
        """The kept text as runs of one kind, each tool call a run of its own (the span's
        output, ollama_tap/otel/content.py); None when no text is kept."""
        if not self.flags & TEXT:
            return None
        text = bytes(self.text)
        kinds, only = self.kinds, self._kind
        if kinds is None:
            if only is None:
                return []
            if only is not OutputKind.TOOL_CALL:
                return [(only, text.decode(errors="replace"))]
        runs: list[tuple[OutputKind, bytes]] = []
        pos = 0
        for i, n in enumerate(self.lengths):
            kind = KINDS[kinds[i]] if kinds is not None else only
            assert kind is not None
            piece, pos = text[pos : pos + n], pos + n
            if kind is not OutputKind.TOOL_CALL and runs and runs[-1][0] is kind:
                runs[-1] = (kind, runs[-1][1] + piece)
            else:
                runs.append((kind, piece))
        return [(kind, data.decode(errors="replace")) for kind, data in runs]

    def pack(self) -> bytes:
        count = len(self.offsets)
        kind = _KIND_CODE[self._kind] if self._kind is not None else 0
        parts: list[bytes | bytearray | array[Any]] = [
            _HEADER.pack(FORMAT, self.flags, count),
            _le(self.offsets),
            self.kinds if self.kinds is not None else bytes([kind]) * count,
            _uint32_le(self.nbytes),
        ]
        if self.flags & TEXT:
            parts += [_uint32_le(self.lengths), self.text]
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

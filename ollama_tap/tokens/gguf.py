"""A GGUF (v2, v3) reader of the key/value header alone, never the tensor data."""

# Hand-written rather than gguf-py (0.19): gguf-py raises KeyError on a repeated key
# (ggml-vocab-dbrx.gguf repeats general.file_type; Ollama keeps the last value), memory-maps
# the whole file, parses every tensor descriptor and builds a numpy view per array element.
# On the 102400-token deepseek-llm vocabulary it takes 5.3 s where this reader takes 88 ms
# (`.venv/bin/python -m bench.vocab`).

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, TypeAlias

from ollama_tap.tokens.errors import GGUFError

GGUFValue: TypeAlias = "int | float | bool | str | list[GGUFValue]"

MAGIC: Final = b"GGUF"
_CHUNK: Final = 1 << 20
_ARRAY: Final = 9
_STRING: Final = 8
# struct codes of the fixed-size GGUF value types (gguf.md: ggml_type-independent kv types).
_SCALARS: Final = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
# The fewest bytes one element can take, to reject counts the rest of the file cannot hold.
_MIN_SIZE: Final = {**{t: struct.calcsize(c) for t, c in _SCALARS.items()}, _STRING: 8, _ARRAY: 12}


@dataclass(frozen=True)
class GGUFMetadata:
    """The key/value section of a GGUF file; tensor descriptors and data are not read."""

    version: int
    """GGUF format version (2 or 3)."""
    tensor_count: int
    """Number of tensors the file declares (their descriptors are skipped)."""
    kv: dict[str, GGUFValue]
    """Every key with its value; for a repeated key the last value wins, as in Ollama."""
    duplicates: tuple[str, ...]
    """Keys that appeared more than once."""
    header_bytes: int
    """Offset where the key/value section ends."""


def _does_not_fit(what: str, n: int, at: int, left: int) -> GGUFError:
    return GGUFError(
        f"GGUF {what} {n} at offset {at} does not fit in the {left} bytes left: "
        "the file is truncated or corrupt"
    )


class _Reader:
    """Little buffered cursor over a seekable binary stream of known size."""

    def __init__(self, stream: BinaryIO, size: int, endian: str = "<") -> None:
        self.stream, self.size, self.endian = stream, size, endian
        self.buf, self.pos, self.base = b"", 0, 0
        self.u32 = struct.Struct(endian + "I")
        self.u64 = struct.Struct(endian + "Q")

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def need(self, n: int, what: str) -> None:
        if len(self.buf) - self.pos >= n:
            return
        if self.offset + n > self.size:
            raise GGUFError(
                f"truncated GGUF header: {what} at offset {self.offset} runs past "
                f"the end of the {self.size}-byte file"
            )
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        while have < n:
            more = self.stream.read(max(n - have, _CHUNK))
            if not more:
                raise GGUFError(f"truncated GGUF header: the file ended while reading {what}")
            parts.append(more)
            have += len(more)
        self.base, self.buf, self.pos = self.offset, b"".join(parts), 0

    def take(self, st: struct.Struct, what: str) -> int:
        self.need(st.size, what)
        (value,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return int(value)

    def count(self, what: str, min_size: int) -> int:
        n = self.take(self.u64, what)
        if n * min_size > self.size - self.offset:
            raise _does_not_fit(what, n, self.offset - 8, self.size - self.offset)
        return n

    def string(self) -> str:
        n = self.count("string length", 1)
        self.need(n, "a string")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")

    def strings(self, count: int) -> list[GGUFValue]:
        # The vocabulary is 100k+ strings: one tight loop that refills only when short.
        out: list[GGUFValue] = []
        unpack = self.u64.unpack_from
        for _ in range(count):
            if len(self.buf) - self.pos < 8:
                self.need(8, "a string length")
            (n,) = unpack(self.buf, self.pos)
            if len(self.buf) - self.pos < 8 + n:
                if n > self.size - self.offset - 8:
                    raise _does_not_fit(
                        "string length", n, self.offset, self.size - self.offset - 8
                    )
                self.need(8 + n, "a string")
            start = self.pos + 8
            out.append(self.buf[start : start + n].decode("utf-8", "replace"))
            self.pos = start + n
        return out

    def scalars(self, code: str, count: int) -> list[GGUFValue]:
        st = struct.Struct(f"{self.endian}{count}{code}")
        self.need(st.size, "an array")
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return list(values)

    def value(self, vtype: int) -> GGUFValue:
        if vtype in _SCALARS:
            return self.scalars(_SCALARS[vtype], 1)[0]
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array()
        raise GGUFError(f"unknown GGUF value type {vtype} at offset {self.offset - 4}")

    def array(self) -> list[GGUFValue]:
        etype = self.take(self.u32, "an array type")
        if etype not in _MIN_SIZE:
            raise GGUFError(f"unknown GGUF array element type {etype} at offset {self.offset - 4}")
        n = self.count("array length", _MIN_SIZE[etype])
        if etype in _SCALARS:
            return self.scalars(_SCALARS[etype], n)
        if etype == _STRING:
            return self.strings(n)
        return [self.array() for _ in range(n)]


def _open_reader(stream: BinaryIO, size: int) -> tuple[_Reader, int]:
    head = stream.read(8)
    if head[:4] != MAGIC:
        raise GGUFError(f"not a GGUF file: it starts with {head[:4]!r}, not b'GGUF'")
    if len(head) < 8:
        raise GGUFError("truncated GGUF header: the file ends inside the version field")
    endian = "<"
    if head[4:6] == b"\0\0" and head[7] in (2, 3):
        endian = ">"  # a big-endian GGUF (s390x builds) stores the version byte-swapped
    (version,) = struct.unpack(endian + "I", head[4:])
    if version not in (2, 3):
        raise GGUFError(f"unsupported GGUF version {version}; only versions 2 and 3 are read")
    reader = _Reader(stream, size, endian)
    reader.base = 8
    return reader, version


def read_stream(stream: BinaryIO) -> GGUFMetadata:
    """Read the key/value section from a seekable binary stream positioned anywhere."""
    size = stream.seek(0, os.SEEK_END)
    stream.seek(0)
    reader, version = _open_reader(stream, size)
    tensors = reader.count("tensor count", 0)
    n_kv = reader.count("key/value count", 8 + 4 + 1)
    kv: dict[str, GGUFValue] = {}
    duplicates: list[str] = []
    for _ in range(n_kv):
        key = reader.string()
        vtype = reader.take(reader.u32, f"the type of key {key!r}")
        if key in kv:
            duplicates.append(key)
        kv[key] = reader.value(vtype)
    return GGUFMetadata(version, tensors, kv, tuple(duplicates), reader.offset)


def read_metadata(path: str | os.PathLike[str]) -> GGUFMetadata:
    """Read the key/value section of the GGUF file at `path` (buffered, header bytes only)."""
    try:
        with Path(path).open("rb") as raw:
            return read_stream(raw)
    except OSError as exc:
        raise GGUFError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from exc

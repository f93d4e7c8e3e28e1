"""The GGUF header reader: real vocabularies, synthetic files of every type, bad files."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from ollama_tap.tokens.errors import GGUFError
from ollama_tap.tokens.gguf import read_metadata, read_stream
from tests.tokens.synth import ARRAY, STRING, gguf_bytes

EVERY_TYPE: list[tuple[str, int, object]] = [
    ("u8", 0, 255), ("i8", 1, -128), ("u16", 2, 65535), ("i16", 3, -32768),
    ("u32", 4, 2**32 - 1), ("i32", 5, -(2**31)), ("f32", 6, 0.5), ("bool", 7, True),
    ("str", STRING, "héllo ▁ 🎉"), ("u64", 10, 2**64 - 1), ("i64", 11, -(2**63)),
    ("f64", 12, 1e300), ("empty", ARRAY, (5, [])), ("ints", ARRAY, (4, [1, 2, 3])),
    ("strs", ARRAY, (STRING, ["a", "", "▁b"])), ("bools", ARRAY, (7, [True, False])),
    ("nested", ARRAY, (ARRAY, [(5, [1, -2]), (STRING, ["x"])])),
]  # fmt: skip
EXPECTED = {
    "u8": 255, "i8": -128, "u16": 65535, "i16": -32768, "u32": 2**32 - 1, "i32": -(2**31),
    "f32": 0.5, "bool": True, "str": "héllo ▁ 🎉", "u64": 2**64 - 1, "i64": -(2**63),
    "f64": 1e300, "empty": [], "ints": [1, 2, 3], "strs": ["a", "", "▁b"],
    "bools": [True, False], "nested": [[1, -2], ["x"]],
}  # fmt: skip


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_every_value_type_round_trips(version: int, endian: str) -> None:
    data = gguf_bytes(EVERY_TYPE, version=version, tensors=7, endian=endian)
    meta = read_stream(io.BytesIO(data))
    assert (meta.version, meta.tensor_count, meta.kv) == (version, 7, EXPECTED)
    assert meta.header_bytes == len(data)


def test_all_shared_vocabularies_parse(vocab_dir: Path) -> None:
    for path in sorted(vocab_dir.glob("*.gguf")):
        meta = read_metadata(path)
        tokens = meta.kv["tokenizer.ggml.tokens"]
        assert isinstance(tokens, list), path.name
        assert len(tokens) > 30000, path.name
        assert meta.header_bytes <= path.stat().st_size


def test_repeated_key_is_tolerated(vocab_dir: Path) -> None:
    meta = read_metadata(vocab_dir / "ggml-vocab-dbrx.gguf")
    assert meta.duplicates == ("general.file_type",)
    assert isinstance(meta.kv["general.file_type"], int)


def test_last_value_of_a_repeated_key_wins() -> None:
    meta = read_stream(io.BytesIO(gguf_bytes([("k", 4, 1), ("k", 4, 2)])))
    assert meta.kv == {"k": 2}
    assert meta.duplicates == ("k",)


class CountingFile(io.FileIO):
    """Counts the bytes actually read."""

    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def test_tensor_data_is_never_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    header = gguf_bytes(EVERY_TYPE, tensors=3)
    with path.open("wb") as f:
        f.write(header)
        f.truncate(70 * 2**30)  # sparse: a "70 GB model" that costs no disk
    with CountingFile(path) as f:
        meta = read_stream(f)
        assert f.bytes_read <= len(header) + 2**20
    assert meta.kv == EXPECTED
    assert read_metadata(path).header_bytes == len(header)


def test_header_only_file_with_declared_tensors_reads(tmp_path: Path) -> None:
    path = tmp_path / "header.gguf"
    path.write_bytes(gguf_bytes([("general.architecture", STRING, "llama")], tensors=291))
    assert read_metadata(path).tensor_count == 291


def test_wrong_magic() -> None:
    with pytest.raises(GGUFError, match=r"not a GGUF file: it starts with b'GGML'"):
        read_stream(io.BytesIO(b"GGML" + b"\0" * 40))


def test_unsupported_version() -> None:
    data = bytearray(gguf_bytes([]))
    data[4:8] = struct.pack("<I", 1)
    with pytest.raises(GGUFError, match="unsupported GGUF version 1"):
        read_stream(io.BytesIO(bytes(data)))


def test_every_truncation_is_a_clear_error() -> None:
    data = gguf_bytes(EVERY_TYPE)
    for cut in range(len(data)):
        with pytest.raises(GGUFError, match=r"truncated|not a GGUF"):
            read_stream(io.BytesIO(data[:cut]))


@pytest.mark.parametrize(
    ("kv", "tail"),
    [
        ([("a", ARRAY, (5, [1]))], 4),  # the array length, before one int32
        ([("s", STRING, "x")], 1),  # the string length, before "x"
        ([("n", ARRAY, (STRING, ["x"]))], 1),  # a string length inside an array
    ],
)
def test_absurd_lengths(kv: list[tuple[str, int, object]], tail: int) -> None:
    data = bytearray(gguf_bytes(kv))
    end = len(data) - tail
    data[end - 8 : end] = struct.pack("<Q", 2**62)
    with pytest.raises(GGUFError, match=r"does not fit .* truncated or corrupt"):
        read_stream(io.BytesIO(bytes(data)))


def test_absurd_key_count() -> None:
    data = bytearray(gguf_bytes([]))
    data[16:24] = struct.pack("<Q", 2**40)
    with pytest.raises(
        GGUFError, match="GGUF key/value count 1099511627776 at offset 16 does not fit"
    ):
        read_stream(io.BytesIO(bytes(data)))


def test_unknown_value_type() -> None:
    with pytest.raises(GGUFError, match="unknown GGUF value type 13"):
        read_stream(io.BytesIO(gguf_bytes([("k", 4, 1)]).replace(b"\x04\0\0\0", b"\x0d\0\0\0")))


def test_missing_file_is_a_gguf_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="cannot read GGUF file"):
        read_metadata(tmp_path / "nope.gguf")

"""Synthetic GGUF headers and Ollama model stores for the tokens tests."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path
from typing import cast

import orjson

ARRAY, STRING = 9, 8
_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _value(vtype: int, value: object, e: str) -> bytes:
    if vtype == STRING:
        raw = str(value).encode()
        return struct.pack(e + "Q", len(raw)) + raw
    if vtype == ARRAY:
        etype, items = cast(tuple[int, list[object]], value)
        body = b"".join(_value(etype, item, e) for item in items)
        return struct.pack(e + "IQ", etype, len(items)) + body
    return struct.pack(e + _CODES[vtype], value)


def gguf_bytes(
    kv: list[tuple[str, int, object]], version: int = 3, tensors: int = 0, endian: str = "<"
) -> bytes:
    """A GGUF header: `kv` holds (key, type, value); an array value is (element type, items)."""
    out = [b"GGUF", struct.pack(endian + "IQQ", version, tensors, len(kv))]
    for key, vtype, value in kv:
        out += [_value(STRING, key, endian), struct.pack(endian + "I", vtype)]
        out.append(_value(vtype, value, endian))
    return b"".join(out)


def vocab_kv(
    model: str, tokens: list[str], types: list[int] | None = None
) -> list[tuple[str, int, object]]:
    return [
        ("general.architecture", STRING, "llama"),
        ("llama.context_length", 4, 4096),
        ("llama.embedding_length", 4, 2048),
        ("general.file_type", 4, 15),
        ("tokenizer.ggml.model", STRING, model),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (5, types or [1] * len(tokens))),
        ("tokenizer.chat_template", STRING, "{{ .Prompt }}"),
    ]


def add_blob(store: Path, data: bytes | Path) -> dict[str, object]:
    """Put `data` in the store's blobs; a file is linked in (a real model is 100s of MB)."""
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (store / "blobs" / digest.replace(":", "-")).write_bytes(data)
        return {"digest": digest, "size": len(data)}
    with data.open("rb") as f:
        digest = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
    blob = store / "blobs" / digest.replace(":", "-")
    try:
        blob.hardlink_to(data)
    except OSError:  # another file system
        shutil.copyfile(data, blob)
    return {"digest": digest, "size": blob.stat().st_size}


def add_model(
    store: Path, name: str, model_blob: bytes | Path, template: bytes = b"{{ .Prompt }}"
) -> str:
    """Write a manifest (`name` is "model:tag" or "ns/model:tag") and its blobs; return the
    manifest digest."""
    config = add_blob(store, b'{"model_format":"gguf"}')
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", **add_blob(store, model_blob)},
        {"mediaType": "application/vnd.ollama.image.template", **add_blob(store, template)},
    ]
    doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
        "layers": layers,
    }
    model, _, tag = name.rpartition(":")
    parts = model.split("/")
    parts = ["library", *parts] if len(parts) == 1 else parts
    path = store.joinpath("manifests", "registry.ollama.ai", *parts, tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = orjson.dumps(doc)
    path.write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()

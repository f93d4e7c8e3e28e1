"""What never reaches the disk as is: credentials, base64 media, embedding vectors, huge bodies.

Media and vectors are replaced in place by a placeholder ``{"$omitted": kind, "bytes": n,
"sha256": hex}``, so a stored body keeps its shape. Media are hashed after base64
decoding (the hash then matches the image file); a vector is hashed as its JSON text.
A string under a credential's name (`"api_key"`, `"password"`, a tool call's `"token"`;
ollama_tap/credentials.py has the rule) is stored as ``"[redacted]"``; the body's sha256 is
still that of the bytes sent.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Mapping
from typing import Any, Final

import orjson

from ollama_tap.credentials import REDACTED, is_credential_key

BODY_CAP: Final = 1024 * 1024
"""Largest stored body; longer ones are cut and marked truncated."""

# Only these request headers are stored (full mode only): an allow-list, so credentials
# under any name (Authorization, Cookie, X-Api-Key, Proxy-Authorization, ...) never are.
HEADER_ALLOW: Final = frozenset(
    {
        "accept",
        "accept-encoding",
        "anthropic-version",
        "content-encoding",
        "content-length",
        "content-type",
        "openai-beta",
        "origin",
        "transfer-encoding",
        "user-agent",
    }
)
_VECTOR_KEYS: Final = frozenset({"embedding", "embeddings"})
_SPECIAL_KEYS: Final = _VECTOR_KEYS | {"images", "data"}
_CONTAINERS: Final = (dict, list)
"""A tuple, not `dict | list`: that expression builds a union object on every use."""


_SPELLINGS: dict[str, str | None] = {}
"""Header names as clients and Ollama spell them → the name as stored (None: not allowed).
Names repeat from request to request: looking them up halves the cost of lower-casing
every one. Holds at most _SPELLINGS_MAX names, the first seen (any other is decided anew)."""
_SPELLINGS_MAX: Final = 1024


def _spelling(name: str) -> str | None:
    # str(): aiohttp hands over istr keys, which orjson refuses.
    stored = str(name) if name.lower() in HEADER_ALLOW else None
    if len(_SPELLINGS) < _SPELLINGS_MAX:
        _SPELLINGS[name] = stored
    return stored


def allowed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in headers.items():
        name = _SPELLINGS[k] if k in _SPELLINGS else _spelling(k)
        if name is not None:
            # A header's bytes that are not UTF-8 reach here as lone surrogates (aiohttp's
            # surrogateescape), which no JSON encoder takes: stored as U+FFFD instead.
            value = str(v)
            out[name] = value if value.isascii() else _utf8(value)
    return out


def _utf8(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def omitted(kind: str, data: bytes) -> dict[str, Any]:
    return {"$omitted": kind, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _media(value: str, found: list[dict[str, Any]]) -> dict[str, Any]:
    payload = value.partition(",")[2] if value.startswith("data:") else value
    try:
        data = binascii.a2b_base64(payload)
    except binascii.Error:
        data = value.encode()
    placeholder = omitted("media", data)
    found.append(placeholder)
    return placeholder


def _vector(value: Any) -> dict[str, Any]:
    return omitted("vector", value.encode() if isinstance(value, str) else orjson.dumps(value))


def _is_data_url(value: str) -> bool:
    return value.startswith("data:") and ";base64," in value[:256]


def scrub(node: Any, found: list[dict[str, Any]]) -> Any:
    """The parsed body with media, vectors and credential strings replaced; media
    placeholders are appended to `found`. The body itself is never changed: a dict or list
    holding something to replace is copied, the rest is shared (it is only serialized).

    Covers native ``images[]`` (top level and in messages), OpenAI ``data:`` URLs
    (``image_url``, ``input_image``) and Anthropic ``{"type": "base64", "data": ...}``
    sources; vectors under ``embedding`` / ``embeddings`` (native and ``/v1``).
    """
    if isinstance(node, dict):
        return _scrub_dict(node, found)
    if isinstance(node, list):
        return _scrub_list(node, found)
    if isinstance(node, str) and _is_data_url(node):
        return _media(node, found)
    return node


# In the two functions below, a leaf that cannot be media (a number, or a string not
# starting "data:") is passed over without a call, and nothing is copied unless something
# in it is replaced: bodies are mostly such leaves, and a 17 kB agent request with tool
# schemas scrubs 30-40% faster (a chat's final object, 35%).


def _scrub_dict(node: dict[str, Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    out = None
    for key, value in node.items():
        if key in _SPECIAL_KEYS:
            new = _special(node, key, value, found)
        elif isinstance(value, _CONTAINERS):
            new = scrub(value, found)
        elif isinstance(value, str):
            # Strings only: a schema or a count under such a name (`"max_tokens": 10`)
            # holds no credential.
            if is_credential_key(key):
                new = REDACTED
            elif value.startswith("data:"):
                new = scrub(value, found)
            else:
                continue
        else:
            continue
        if new is not value:
            if out is None:
                out = dict(node)
            out[key] = new
    return node if out is None else out


def _scrub_list(node: list[Any], found: list[dict[str, Any]]) -> list[Any]:
    out = None
    for i, value in enumerate(node):
        if isinstance(value, _CONTAINERS) or (isinstance(value, str) and value.startswith("data:")):
            new = scrub(value, found)
            if new is not value:
                if out is None:
                    out = list(node)
                out[i] = new
    return node if out is None else out


def _special(node: dict[str, Any], key: str, value: Any, found: list[dict[str, Any]]) -> Any:
    """The value under one of _SPECIAL_KEYS, scrubbed."""
    if key == "images" and isinstance(value, list):
        return [_media(v, found) if isinstance(v, str) else v for v in value]
    if key == "data" and isinstance(value, str) and node.get("type") == "base64":
        return _media(value, found)
    if key in _VECTOR_KEYS and isinstance(value, list | str):
        return _vectors(key, value)
    return scrub(value, found)


def _vectors(key: str, value: list[Any] | str) -> Any:
    if key == "embeddings" and isinstance(value, list):
        return [_vector(v) for v in value]
    return _vector(value)


def capped(data: bytes) -> dict[str, Any]:
    """JSON text as stored: embedded as JSON when whole, else its first BODY_CAP bytes."""
    if len(data) <= BODY_CAP:
        return {"json": orjson.Fragment(data), "truncated": False}
    return {"text": data[:BODY_CAP].decode(errors="ignore"), "truncated": True}

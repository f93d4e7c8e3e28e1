"""One request of every route family, and replies compared as a client would see them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

# Header values that legitimately differ between two replies (lengths change with the
# number of digits in a duration); hop-by-hop headers are the proxy's to drop.
_VOLATILE_HEADERS = {"date", "content-length"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding"}

ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/", None),
    ("HEAD", "/", None),
    ("GET", "/api/version", None),
    ("HEAD", "/api/version", None),
    ("GET", "/api/tags", None),
    ("GET", "/api/ps", None),
    ("POST", "/api/show", {"model": "llama3.2"}),
    ("POST", "/api/show", {"model": "llama3.2", "verbose": True}),
    ("POST", "/api/generate", {"model": "llama3.2", "prompt": "Why is the sky blue?"}),
    ("POST", "/api/generate", {"model": "llama3.2", "prompt": "hi", "stream": False}),
    ("POST", "/api/generate", {"model": "llama3.2"}),
    ("POST", "/api/generate", {"model": "llama3.2", "keep_alive": 0}),
    ("POST", "/api/generate", {"model": "nope", "prompt": "hi"}),
    ("POST", "/api/chat", {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}),
    (
        "POST",
        "/api/chat",
        {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": False},
    ),
    ("POST", "/api/embed", {"model": "all-minilm", "input": ["a", "b"]}),
    ("POST", "/api/embeddings", {"model": "all-minilm", "prompt": "a"}),
    ("POST", "/api/pull", {"model": "llama3.2"}),
    ("POST", "/api/pull", {"model": "llama3.2", "stream": False}),
    ("POST", "/api/copy", {"source": "llama3.2", "destination": "mine"}),
    ("DELETE", "/api/delete", {"model": "nothing-here"}),
    ("HEAD", "/api/blobs/sha256:" + "0" * 64, None),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    ),
    (
        "POST",
        "/v1/chat/completions",
        {
            "model": "llama3.2",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]},
    ),
    ("POST", "/v1/completions", {"model": "llama3.2", "prompt": "hi", "stream": True}),
    ("POST", "/v1/embeddings", {"model": "all-minilm", "input": "hi"}),
    ("GET", "/v1/models", None),
    ("POST", "/v1/responses", {"model": "llama3.2", "input": "hi", "stream": True}),
    (
        "POST",
        "/v1/messages",
        {
            "model": "llama3.2",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
    ),
    ("GET", "/api/does-not-exist-yet?x=1&y=%2F", None),
    ("PUT", "/api/generate", None),
]


async def _pieces(data: bytes) -> AsyncIterator[bytes]:
    """The body in two pieces: aiohttp's client sends it chunked."""
    yield data[: len(data) // 2]
    yield data[len(data) // 2 :]


async def fetch(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    chunked: bool = False,
    **kw: Any,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request, its body with a length or (`chunked`) chunked."""
    data: Any = orjson.dumps(body) if body is not None else None
    if chunked and data is not None:
        data = _pieces(data)
    async with session.request(method, url, data=data, **kw) as resp:
        raw = await resp.read()
        return resp.status, list(resp.headers.items()), raw


def comparable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted(
        (k.lower(), "" if k.lower() in _VOLATILE_HEADERS else v)
        for k, v in headers
        if k.lower() not in _HOP_BY_HOP
    )

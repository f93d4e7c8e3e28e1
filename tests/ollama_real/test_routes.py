"""Every native route of a real Ollama through the proxy: the bytes a client gets direct.

Each request is sent once straight to Ollama and once through the proxy, and the two replies
compared: status, Content-Type, and the body byte for byte once the fields that differ between
two runs of one request are masked (clocks, durations, random ids). Generation is greedy with a
fixed seed, so the tokens, their counts and the `context` array must match exactly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import pytest

from tests.conftest import Proxy
from tests.ollama_real.conftest import (
    BOTH_RELEASES,
    GREEDY,
    MODEL,
    SECOND,
    Ollama,
    Reply,
    call,
)

# What two runs of one request may differ in: the clocks and durations of the final object,
# and the random ids of the compatibility routes. The proxy must not touch anything else.
_VOLATILE: Final = re.compile(
    rb'"(?:created_at|total_duration|load_duration|prompt_eval_duration|eval_duration'
    rb'|id|created)":(?:"[^"]*"|\d+)'
)

_DIGEST: Final = re.compile(rb"sha256:[0-9a-f]{64}")

CHAT: Final = [{"role": "user", "content": "Name three colours of the rainbow."}]

NATIVE: Final[list[tuple[str, str, Any]]] = [
    ("POST", "/api/show", {"model": MODEL}),
    ("POST", "/api/show", {"model": MODEL, "verbose": True}),
    ("POST", "/api/generate", {"model": MODEL, "prompt": "The sky is", "options": GREEDY}),
    (
        "POST",
        "/api/generate",
        {"model": MODEL, "prompt": "The sky is", "options": GREEDY, "stream": False},
    ),
    ("POST", "/api/chat", {"model": MODEL, "messages": CHAT, "options": GREEDY}),
    ("POST", "/api/chat", {"model": MODEL, "messages": CHAT, "options": GREEDY, "stream": False}),
]
"""The routes whose server side changed with llama-server (0.30.0): run against both eras."""

ROUTES: Final[list[tuple[str, str, Any]]] = [
    ("GET", "/api/version", None),
    ("GET", "/api/tags", None),
    ("POST", "/api/embed", {"model": MODEL, "input": ["a red fox", "a blue whale"]}),
    ("POST", "/api/embeddings", {"model": MODEL, "prompt": "a red fox"}),
    ("POST", "/api/generate", {"model": "no-such-model", "prompt": "hi"}),
    ("POST", "/api/chat", {"model": MODEL, "messages": CHAT, "think": True}),
    ("POST", "/api/pull", {"model": "Not A Valid Name!"}),
    ("POST", "/api/show", {"model": "no-such-model"}),
    ("DELETE", "/api/delete", {"model": "no-such-model"}),
    ("POST", "/api/copy", {"source": "no-such-model", "destination": "x"}),
    (
        "POST",
        "/v1/chat/completions",
        {"model": MODEL, "messages": CHAT, "max_tokens": 12, "temperature": 0, "seed": 7},
    ),
    (
        "POST",
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": CHAT,
            "max_tokens": 12,
            "temperature": 0,
            "seed": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    (
        "POST",
        "/v1/messages",
        {"model": MODEL, "messages": CHAT, "max_tokens": 12, "temperature": 0, "stream": True},
    ),
    (
        "POST",
        "/v1/messages",
        {"model": MODEL, "messages": CHAT, "max_tokens": 12, "temperature": 0},
    ),
    ("GET", "/v1/models", None),
]


def masked(reply: Reply) -> tuple[int, str | None, bytes]:
    return reply.status, reply.headers.get("Content-Type"), _VOLATILE.sub(b"~", reply.body)


def _ids(routes: list[tuple[str, str, Any]]) -> list[str]:
    return [f"{method} {path}" for method, path, _ in routes]


@BOTH_RELEASES
@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=_ids(ROUTES))
async def test_a_route_through_the_proxy_is_the_route_direct(
    tapped: Proxy, real_ollama: Ollama, method: str, path: str, body: Any
) -> None:
    """On v0.30.0 the request is sent direct once first, as the native routes are below:
    the compared pair must find the same prompt cache."""
    if real_ollama.llama_server:
        await call(real_ollama.url, method, path, body)
    direct = await call(real_ollama.url, method, path, body)
    proxied = await call(tapped.url, method, path, body)
    assert masked(proxied) == masked(direct)


@BOTH_RELEASES
@pytest.mark.parametrize(("method", "path", "body"), NATIVE, ids=_ids(NATIVE))
async def test_a_native_route_through_the_proxy_is_the_route_direct(
    tapped: Proxy, real_ollama: Ollama, method: str, path: str, body: Any
) -> None:
    """On both eras. The request is sent direct once first: v0.30.0's `prompt_eval_count` is
    only the tokens llama-server did not find in its slot's cache (`Timings.PromptN`; v0.30.1
    adds `cache_n` back, ollama/ollama#16428), so the compared pair must find the same cache.
    (A prompt as short as the generate one is re-processed whole: Gemma 3's sliding window
    leaves llama-server no cache checkpoint to resume from.)"""
    await call(real_ollama.url, method, path, body)
    direct = await call(real_ollama.url, method, path, body)
    proxied = await call(tapped.url, method, path, body)
    assert masked(proxied) == masked(direct)
    if path == "/api/generate" and body.get("stream") is False:
        final = direct.json()
        assert final["context"], "both eras return the context of a /api/generate reply"
        prompt = len(final["context"]) - final["eval_count"]
        if real_ollama.llama_server:
            # The prompt tokenized without <bos> (llama-server's /tokenize), the count only
            # what llama-server did not find cached: 4 run alone, 3 after the rest of the
            # tier's v0.30.0 tests (one token, <bos>, reused from its cache).
            assert prompt == 3 and final["prompt_eval_count"] in (3, 4), (prompt, final)
        else:
            assert final["prompt_eval_count"] == 4  # <bos>, "The", " sky", " is"


@BOTH_RELEASES
async def test_ps_through_the_proxy_is_ps_direct(tapped: Proxy, real_ollama: Ollama) -> None:
    """The row of a model loaded without num_ctx: the default context is 4096 on both eras
    on a CPU (from v0.15.5 by total VRAM, under 23 GiB 4096), the model on the CPU
    (`size_vram` 0)."""
    await real_ollama.unload_all()
    loading = {"model": MODEL, "prompt": "hi", "options": GREEDY}
    await call(real_ollama.url, "POST", "/api/generate", loading)
    direct = await call(real_ollama.url, "GET", "/api/ps")
    proxied = await call(tapped.url, "GET", "/api/ps")
    [row] = direct.json()["models"]
    assert (row["name"], row["context_length"], row["size_vram"]) == (MODEL, 4096, 0)
    assert masked(proxied) == masked(direct)


@BOTH_RELEASES
async def test_create_copy_and_delete_through_the_proxy(
    tapped: Proxy, real_ollama: Ollama, tmp_path: Path
) -> None:
    """A model made from another with a system prompt, as `ollama create` does: the stream of
    statuses is the one Ollama gives direct (each with a new system prompt, so each writes a
    new layer; only the digests differ), and the model is really there, then copied, then
    gone."""
    made = {"from": SECOND, "stream": True}
    direct = await call(
        real_ollama.url, "POST", "/api/create",
        {"model": "made-direct", "system": "You answer in one word.", **made},
    )  # fmt: skip
    proxied = await call(
        tapped.url, "POST", "/api/create",
        {"model": "made-tapped", "system": "You answer in two words.", **made},
    )  # fmt: skip
    assert proxied.status == direct.status == 200
    assert _DIGEST.sub(b"~", proxied.body) == _DIGEST.sub(b"~", direct.body)
    assert b"creating new layer" in proxied.body
    assert proxied.lines()[-1] == {"status": "success"}
    copied = await call(
        tapped.url, "POST", "/api/copy", {"source": "made-tapped", "destination": "made-copy"}
    )
    assert copied.status == 200
    names = {m["name"] for m in (await call(real_ollama.url, "GET", "/api/tags")).json()["models"]}
    assert {"made-direct:latest", "made-tapped:latest", "made-copy:latest"} <= names
    for name in ("made-direct", "made-tapped", "made-copy"):
        gone = await call(tapped.url, "DELETE", "/api/delete", {"model": name})
        assert gone.status == 200, gone.body
    names = {m["name"] for m in (await call(real_ollama.url, "GET", "/api/tags")).json()["models"]}
    assert not {"made-direct:latest", "made-tapped:latest", "made-copy:latest"} & names

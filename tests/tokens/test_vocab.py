"""Vocabulary sources (local store, /api/show) and the per-digest cache."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from blockbuster import blockbuster_ctx
from yarl import URL

from ollama_tap.tokens.errors import VocabError
from ollama_tap.tokens.gguf import read_metadata
from ollama_tap.tokens.store import ModelStore
from ollama_tap.tokens.vocab import Vocab, VocabCache, VocabSource

Server = Callable[[web.Application], Awaitable[Any]]


def show_app(model_info: dict[str, object], calls: list[dict[str, object]]) -> web.Application:
    """A fake Ollama whose /api/show knows one model, "phi3", and elides arrays unless verbose."""

    async def show(request: web.Request) -> web.Response:
        body = await request.json()
        calls.append(body)
        if body["model"] != "phi3":
            return web.json_response({"error": f"model '{body['model']}' not found"}, status=404)
        info = {k: (v if body.get("verbose") or not isinstance(v, list) else None)
                for k, v in model_info.items()}  # fmt: skip
        return web.Response(
            body=orjson.dumps({"model_info": info}), content_type="application/json"
        )

    app = web.Application()
    app.router.add_post("/api/show", show)
    return app


@pytest.fixture
def phi3_info(vocab_dir: Path) -> dict[str, object]:
    kv = read_metadata(vocab_dir / "ggml-vocab-phi-3.gguf").kv
    # Ollama leaves these two out of model_info.
    return {k: v for k, v in kv.items() if k not in {"general.name", "tokenizer.chat_template"}}


async def test_show_source_decodes(
    aiohttp_server: Server, phi3_info: dict[str, object], tmp_path: Path
) -> None:
    calls: list[dict[str, object]] = []
    server = await aiohttp_server(show_app(phi3_info, calls))
    empty = tmp_path / "store"
    (empty / "manifests").mkdir(parents=True)
    async with aiohttp.ClientSession() as session:
        source = VocabSource(session, URL(str(server.make_url("/"))), ModelStore(empty))
        vocab = await source.load("phi3")
        assert vocab.decode([1, 15043, 29892, 3186, 29991]) == "<s> Hello, world!"
        with pytest.raises(VocabError, match="has no model 'ghost'; pull it first"):
            await source.load("ghost")
    assert calls[0] == {"model": "phi3", "verbose": True}
    assert vocab.source.endswith("/api/show")


def test_elided_arrays_are_refused() -> None:
    body = orjson.dumps({"model_info": {"tokenizer.ggml.model": "llama",
                                        "tokenizer.ggml.tokens": None}})  # fmt: skip
    with pytest.raises(VocabError, match="elided the token arrays"):
        Vocab.from_show(body, "http://x/api/show")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "did not return a JSON object"),
        (b"[]", "did not return a JSON object"),
        (b"{}", "returned no model_info"),
        (b'{"model_info": {}}', "has no vocabulary"),
        (
            b'{"model_info": {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"],'
            b' "tokenizer.ggml.token_type": ["x"]}}',
            "malformed vocabulary",
        ),
    ],
)
def test_bad_show_bodies(body: bytes, message: str) -> None:
    with pytest.raises(VocabError, match=message):
        Vocab.from_show(body, "http://x/api/show")


async def test_local_store_first_off_the_loop(store: Path) -> None:
    source = VocabSource(None, None, ModelStore(store))
    with blockbuster_ctx():  # the GGUF read must run in a thread, not on the event loop
        vocab = await source.load("tiny")
    assert vocab.decode([4, 6]) == "Hello world"


async def test_local_store_by_digest(store: Path) -> None:
    s = ModelStore(store)
    digest = s.manifest("someone/tiny:q4").digest
    source = VocabSource(None, None, s)
    assert (await source.load("renamed:latest", f"sha256:{digest}")).model == "llama"
    with pytest.raises(VocabError, match=r"is not in the local store .* no upstream"):
        await source.load("tiny", "0" * 64)


async def test_cache_loads_once_for_concurrent_callers() -> None:
    calls: list[tuple[str, str | None]] = []
    release = asyncio.Event()

    async def load(model: str, digest: str | None) -> Vocab:
        calls.append((model, digest))
        await release.wait()
        return Vocab.from_kv({"tokenizer.ggml.model": "llama",
                              "tokenizer.ggml.tokens": ["▁a"]}, model)  # fmt: skip

    cache = VocabCache(load)
    waiters = [asyncio.create_task(cache.get("m", "sha256:AB")) for _ in range(20)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # one caller giving up does not cancel the others' load
    release.set()
    results = await asyncio.gather(*waiters[1:])
    assert calls == [("m", "sha256:AB")]
    assert all(v is results[0] for v in results)
    assert await cache.get("other-name", "ab") is results[0]  # the key is the digest


async def test_cache_retries_after_a_failure() -> None:
    attempts = 0

    async def load(model: str, digest: str | None) -> Vocab:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise VocabError("upstream down")
        return Vocab.from_kv({"tokenizer.ggml.model": "gpt2",
                              "tokenizer.ggml.tokens": ["a"]}, model)  # fmt: skip

    cache = VocabCache(load)
    with pytest.raises(VocabError, match="upstream down"):
        await cache.get("m")
    assert (await cache.get("m")).decode([0]) == "a"
    assert attempts == 2


async def test_cache_keeps_the_most_recently_used_few() -> None:
    loads: list[str] = []

    async def load(model: str, digest: str | None) -> Vocab:
        loads.append(model)
        return Vocab.from_kv({"tokenizer.ggml.model": "gpt2",
                              "tokenizer.ggml.tokens": ["a"]}, model)  # fmt: skip

    cache = VocabCache(load, size=2)
    await cache.get("a")
    await cache.get("b")
    await cache.get("a")  # a is now the most recent
    await cache.get("c")  # evicts b
    await cache.get("a")
    await cache.get("b")
    assert loads == ["a", "b", "c", "b"]

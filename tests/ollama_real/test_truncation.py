"""Truncation as a real Ollama does it, and the verdicts the proxy gives.

Ollama 0.24's Go runner cuts an over-long prompt to exactly C tokens (`num_keep` kept, the
front of the rest dropped: runner/ollamarunner/runner.go `NewSequence`); v0.30.0 cuts it to
C − 1 before llama-server sees it (llm/llama_server.go `completionPromptForRequest`: "keep
one token of headroom"). `/api/generate`'s `context` is tokenized from the whole prompt, so
the gap tells how many were lost. The proxy picks the era's rules from /api/version.

`/api/embed` runs on v0.30.0 only, with an embedding model (`embedder`: the same Gemma with
mean pooling declared): v0.24.0 gives this Gemma no embeddings (501), and loads the pooled
one as EmbeddingGemma, whose dense projection this GGUF lacks (its runner panics in
model/models/gemma3/embed.go).
"""

from __future__ import annotations

from typing import Any, Final

import orjson
import pytest

from tests.conftest import Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama, call
from tests.ollama_real.provision import CURRENT
from tests.support.metrics import settled
from tests.support.records import records

C: Final = 256
"""A small runtime context: prompts over it are quick to make and to evaluate."""
LONG: Final = " ".join(f"item{i}" for i in range(400))
"""Well over C tokens of Gemma's vocabulary."""
BATCH: Final = 128
"""An embedding batch (num_batch) well under an input that fits C."""


async def verdict(proxy: Proxy) -> dict[str, Any] | None:
    await settled(proxy)
    [record] = await records(proxy, 1)
    found: dict[str, Any] | None = record["truncation"]
    return found


@BOTH_RELEASES
async def test_a_generate_prompt_over_c_loses_its_front_and_t2_counts_it(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    await real_ollama.fresh_slot()
    body = {
        "model": MODEL, "prompt": LONG, "stream": False,
        "options": {"num_ctx": C, "num_predict": 4, "temperature": 0},
    }  # fmt: skip
    reply = (await call(tapped.url, "POST", "/api/generate", body)).json()
    assert reply["prompt_eval_count"] == real_ollama.kept(C)
    lost = len(reply["context"]) - (reply["prompt_eval_count"] + reply["eval_count"])
    assert lost > C // 4
    found = await verdict(tapped)
    assert found is not None
    assert (found["rule"], found["kind"], found["context"]) == ("T2", "prompt_truncated", C)
    assert found["tokens_lost"] == lost and found["prompt_tokens"] == real_ollama.kept(C)


@BOTH_RELEASES
async def test_a_chat_prompt_over_c_is_cut_or_refused_and_the_verdict_says_which(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """0.24 cuts the chat to C (T1). v0.30.0 renders a chat for a model without a Go
    template (this GGUF has none) in llama-server (`--chat-template chatml`), so Ollama's
    token cut, made on completion prompts only, never runs: llama-server refuses the whole
    prompt, and Ollama answers 400 with llama-server's JSON error body as its `error` string
    (streamed or not; T3, with the count llama-server gives)."""
    await real_ollama.fresh_slot()
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": LONG}], "stream": False,
        "options": {"num_ctx": C, "num_predict": 4, "temperature": 0},
    }  # fmt: skip
    reply = await call(tapped.url, "POST", "/api/chat", body)
    found = await verdict(tapped)
    assert found is not None
    if real_ollama.llama_server:
        error = orjson.loads(reply.json()["error"])["error"]
        assert (reply.status, error["type"], error["n_ctx"]) == (
            400,
            "exceed_context_size_error",
            C,
        )
        assert (found["rule"], found["kind"], found["context"]) == ("T3", "refused", C)
        assert found["prompt_tokens"] == error["n_prompt_tokens"] > C
    else:
        assert reply.status == 200 and reply.json()["prompt_eval_count"] == C
        assert (found["rule"], found["kind"], found["context"]) == ("T1", "prompt_truncated", C)


@BOTH_RELEASES
async def test_a_repeated_prompt_that_fits_gets_no_verdict(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """The same /api/generate prompt twice, well within C: no verdict on either era. On
    v0.30.0 the second finds its front in llama-server's cache and reports only the rest as
    `prompt_eval_count`, while its `context` still holds the whole prompt: a gap T2 read as
    a cut until the rule learnt that v0.30.0's count leaves the cache out."""
    await real_ollama.fresh_slot()
    prompt = " ".join(f"item{i}" for i in range(60))
    body = {
        "model": MODEL, "prompt": prompt, "stream": False,
        "options": {"num_ctx": C, "num_predict": 2, "temperature": 0},
    }  # fmt: skip
    replies = [(await call(tapped.url, "POST", "/api/generate", body)).json() for _ in range(2)]
    first, again = (r["prompt_eval_count"] for r in replies)
    whole = len(replies[0]["context"]) - replies[0]["eval_count"]
    assert first in (whole, whole + 1)  # with or without BOS
    if real_ollama.llama_server:
        assert again < first // 4  # measured: 5 of 171
    else:
        assert again == first
    await settled(tapped)
    assert [r["truncation"] for r in await records(tapped, 2)] == [None, None]


@BOTH_RELEASES
async def test_truncate_false_is_refused_and_t3_says_so(tapped: Proxy, real_ollama: Ollama) -> None:
    body = {
        "model": MODEL, "prompt": LONG, "stream": False, "truncate": False,
        "options": {"num_ctx": C, "num_predict": 4},
    }  # fmt: skip
    reply = await call(tapped.url, "POST", "/api/generate", body)
    assert reply.status == 400, reply.body
    found = await verdict(tapped)
    assert found is not None and (found["rule"], found["kind"]) == ("T3", "refused")


CURRENT_ONLY: Final = pytest.mark.parametrize("real_ollama", [CURRENT], indirect=True)


async def embed(proxy: Proxy, model: str, text: str, **fields: Any) -> tuple[int, Any]:
    reply = await call(proxy.url, "POST", "/api/embed", {"model": model, "input": text, **fields})
    return reply.status, reply.json()


@CURRENT_ONLY
async def test_an_embedding_input_over_c_is_cut_and_t9_says_so(
    tapped: Proxy, real_ollama: Ollama, embedder: str
) -> None:
    """v0.30.0 cuts an input over C to its first C tokens less the specials llama-server
    adds back (server/routes.go `EmbedHandler`, `truncateInput`, `adjustTokenLimit`), so
    the count lands within 2 of C, and T9 says so; the loss itself is not in the reply
    (T9 counts none). With `truncate: false` the same input is refused, 400, T3."""
    options = {"num_ctx": C}
    status, reply = await embed(tapped, embedder, LONG, options=options)
    assert status == 200 and len(reply["embeddings"]) == 1, reply
    assert C - 2 <= reply["prompt_eval_count"] <= C
    status, refusal = await embed(tapped, embedder, LONG, options=options, truncate=False)
    assert (status, refusal) == (400, {"error": "the input length exceeds the context length"})
    await settled(tapped)
    refused, cut = (r["truncation"] for r in await records(tapped, 2))
    assert cut is not None and (cut["rule"], cut["kind"], cut["context"]) == (
        "T9",
        "embed_truncated",
        C,
    )
    assert (cut["prompt_tokens"], cut["tokens_lost"]) == (reply["prompt_eval_count"], None)
    assert refused is not None and (refused["rule"], refused["kind"]) == ("T3", "refused")


@CURRENT_ONLY
async def test_an_embedding_input_over_num_batch_is_retried_cut_and_t9_says_so(
    tapped: Proxy, real_ollama: Ollama, embedder: str
) -> None:
    """An input that fits C but not the batch: v0.30.0 starts llama-server with `-b`/`-ub`
    = num_batch for an embedding model (llm/llama_server.go `appendBatchArgs`,
    `embeddingBatchSize`), llama-server refuses the input, Ollama turns that into a 400
    (`normalizeEmbeddingError`) and retries it cut to the batch (server/routes.go
    `embedWithRetry`, `truncateInputToLimit(text, opts.NumBatch)`): P lands within 2 of B
    and T9 names the batch. At the default batch (min(2048, C)) it fits: no verdict."""
    text = " ".join(f"item{i}" for i in range(100))  # ~290 tokens
    options: dict[str, Any] = {"num_ctx": 1024}
    status, whole = await embed(tapped, embedder, text, options=options)
    assert status == 200 and whole["prompt_eval_count"] > 2 * BATCH
    status, cut = await embed(tapped, embedder, text, options={**options, "num_batch": BATCH})
    assert status == 200 and BATCH - 2 <= cut["prompt_eval_count"] <= BATCH
    await settled(tapped)
    retried, fitted = (r["truncation"] for r in await records(tapped, 2))
    assert fitted is None
    assert retried is not None and (retried["rule"], retried["context"]) == ("T9", 1024)
    assert retried["prompt_tokens"] == cut["prompt_eval_count"]
    assert f"num_batch {BATCH}" in retried["explanation"]

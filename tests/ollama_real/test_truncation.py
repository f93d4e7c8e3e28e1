"""Truncation as a real Ollama does it, and the verdicts the proxy gives.

Ollama 0.24's Go runner cuts an over-long prompt to exactly C tokens (`num_keep` kept, the
front of the rest dropped: runner/ollamarunner/runner.go `NewSequence`); `/api/generate`'s
`context` is tokenized from the whole prompt, so the gap tells how many were lost; an
embedding input that fails is cut to C less its special tokens and embedded again.
"""

from __future__ import annotations

import random
from typing import Any, Final

from tests.conftest import Proxy
from tests.ollama_real.conftest import MODEL, Ollama, call
from tests.support.metrics import settled
from tests.support.records import records

C: Final = 256
"""A small runtime context: prompts over it are quick to make and to evaluate."""
LONG: Final = " ".join(f"item{i}" for i in range(400))
"""Well over C tokens of Gemma's vocabulary."""


def truncations(proxy: Proxy) -> float:
    return sum(
        s.value
        for family in proxy.registry.collect()
        for s in family.samples
        if s.name == "ollama_tap_truncations_total"
    )


async def verdict(proxy: Proxy) -> dict[str, Any] | None:
    await settled(proxy)
    [record] = await records(proxy, 1)
    found: dict[str, Any] | None = record["truncation"]
    return found


async def test_a_generate_prompt_over_c_loses_its_front_and_t2_counts_it(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    body = {
        "model": MODEL, "prompt": LONG, "stream": False,
        "options": {"num_ctx": C, "num_predict": 4, "temperature": 0},
    }  # fmt: skip
    reply = (await call(tapped.url, "POST", "/api/generate", body)).json()
    assert reply["prompt_eval_count"] == C  # the Go runner keeps exactly C
    lost = len(reply["context"]) - (reply["prompt_eval_count"] + reply["eval_count"])
    assert lost > C // 4
    found = await verdict(tapped)
    assert found is not None
    assert (found["rule"], found["kind"], found["context"]) == ("T2", "prompt_truncated", C)
    assert found["tokens_lost"] == lost and found["prompt_tokens"] == C


async def test_a_chat_prompt_over_c_is_cut_to_c_and_t1_says_so(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": LONG}], "stream": False,
        "options": {"num_ctx": C, "num_predict": 4, "temperature": 0},
    }  # fmt: skip
    reply = (await call(tapped.url, "POST", "/api/chat", body)).json()
    assert reply["prompt_eval_count"] == C
    found = await verdict(tapped)
    assert found is not None
    assert (found["rule"], found["kind"], found["context"]) == ("T1", "prompt_truncated", C)


async def test_gemma_embeds_nothing_on_0_24_and_no_verdict_is_given(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """Ollama 0.24's Go engine has no pooling for Gemma 3, so /api/embed answers 501 whatever
    the input: the T9 cut cannot be shown with this model (the fake still covers it), and
    the proxy must relay the refusal without calling it a truncation."""
    body = {"model": MODEL, "input": LONG, "options": {"num_ctx": C}}
    reply = await call(tapped.url, "POST", "/api/embed", body)
    assert (reply.status, reply.json()) == (
        501,
        {"error": "this model does not support embeddings"},
    )
    assert await verdict(tapped) is None


async def test_truncate_false_is_refused_and_t3_says_so(tapped: Proxy, real_ollama: Ollama) -> None:
    body = {
        "model": MODEL, "prompt": LONG, "stream": False, "truncate": False,
        "options": {"num_ctx": C, "num_predict": 4},
    }  # fmt: skip
    reply = await call(tapped.url, "POST", "/api/generate", body)
    assert reply.status == 400, reply.body
    found = await verdict(tapped)
    assert found is not None and (found["rule"], found["kind"]) == ("T3", "refused")


async def test_ordinary_requests_get_no_verdict(tapped: Proxy, real_ollama: Ollama) -> None:
    """100 varied requests that fit (generate and chat, streamed or not, with and without a
    small num_ctx, a few turns of history): not one truncation."""
    rng = random.Random(30)
    words = ["river", "stone", "cloud", "lamp", "garden", "engine", "silver", "quiet", "sky"]
    for i in range(100):
        text = " ".join(rng.choices(words, k=rng.randint(1, 40)))
        options: dict[str, Any] = {"num_predict": rng.randint(1, 3), "temperature": 0}
        if i >= 50:  # the second half at a small num_ctx (one reload, not one per switch)
            options["num_ctx"] = C
        body: dict[str, Any] = {"model": MODEL, "stream": i % 2 == 0, "options": options}
        if i % 4 < 2:
            endpoint, body["prompt"] = "/api/generate", text
        else:
            endpoint = "/api/chat"
            body["messages"] = [
                {"role": "user", "content": text},
                {"role": "assistant", "content": rng.choice(words)},
                {"role": "user", "content": rng.choice(words)},
            ][: rng.choice([1, 3])]
        reply = await call(tapped.url, "POST", endpoint, body)
        assert reply.status == 200, reply.body
    await settled(tapped)
    assert truncations(tapped) == 0
    verdicts = [r["truncation"] for r in await records(tapped, 100, limit="100")]
    assert verdicts == [None] * 100

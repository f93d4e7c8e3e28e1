"""The truncation rules a CPU Ollama can produce beyond test_truncation.py: the same verdict,
the same tokens lost, on the real engine, v0.24.0's Go runner and v0.30.0's llama-server.

Ollama 0.24's Go runner (runner/ollamarunner/runner.go) keeps exactly C prompt tokens
whatever `num_keep` (`NewSequence`: `num_keep` tokens, then the tail), sizes its cache at C
with no padding, shifts the cache when a reply runs past C (`ShiftCacheSlot`), or with
`shift: false` stops with `done_reason: "length"` once prompt and output fill it, and reports
`prompt_eval_count` as the whole prompt (`numPromptInputs`, cached tokens included) with no
`prompt_eval_cached_count` at all.

v0.30.0 cuts a prompt to C − 1 before llama-server sees it (llm/llama_server.go
`completionPromptForRequest`), and llama.cpp pads the slot up to a multiple of 256
(`src/llama-context.cpp`, `GGML_PAD(n_ctx, 256)`): a num_ctx of 300 runs in 512 tokens, so a
reply past 300 and under 512 neither shifts nor stops, and with `shift: false` the stop is at
512. Its `prompt_eval_count` leaves out the prompt's cached front (`Timings.PromptN`, until
v0.30.1), so the tests that count a prompt start from a runner with nothing cached.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import orjson
import pytest

from ollama_tap.app import POLLER
from tests.conftest import Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama, call
from tests.support.metrics import settled
from tests.support.records import records
from tests.support.waiting import eventually

C: Final = 300
"""Not a multiple of 256: llama-server (0.30+) would run it in a 512-token slot, the Go
runner in exactly 300."""
KEEP: Final = 64
KEPT_MODEL: Final = "gemma3-keep:270m"
"""MODEL's weights with a Modelfile `PARAMETER num_keep 64` (the proxy reads it from
/api/show `parameters`)."""
LONG: Final = " ".join(f"item{i}" for i in range(400))
COUNTING: Final = ", ".join(str(i) for i in range(1, 61)) + ","
"""A raw prompt of about 230 tokens (Gemma splits digits) that a model goes on counting from:
a reply that runs past C rather than stopping."""


async def last_record(proxy: Proxy, count: int = 1) -> dict[str, Any]:
    """The newest record, once the proxy has written `count` (the test's requests so far)."""
    await settled(proxy)
    return (await records(proxy, count))[0]


@pytest.fixture
async def kept_model(real_ollama: Ollama) -> AsyncIterator[str]:
    """KEPT_MODEL, created for the test from MODEL (one blob, one more manifest), deleted
    after."""
    modelfile = real_ollama.log.parent / "keep.Modelfile"
    modelfile.write_text(f"FROM {MODEL}\nPARAMETER num_keep {KEEP}\n")
    done = real_ollama.cli("create", KEPT_MODEL, "-f", str(modelfile))
    assert done.returncode == 0, done.stderr
    yield KEPT_MODEL
    real_ollama.cli("rm", KEPT_MODEL)


@BOTH_RELEASES
async def test_a_modelfile_num_keep_does_not_move_the_cut(
    tapped: Proxy, real_ollama: Ollama, kept_model: str
) -> None:
    """The proxy reads the Modelfile's num_keep (it decides L(C,k) from 0.30.11 on); before
    that the cut keeps C (C − 1 on v0.30.0) whatever num_keep, so T2 counts the tokens lost
    at that length, and on 0.24 T1 fires at that count of a chat. v0.30.0 cuts no chat of
    this template-less GGUF (test_truncation.py says why): llama-server refuses it against
    its padded 512-token slot, and T3 says so."""
    poller = tapped.app[POLLER]
    await eventually(lambda: poller.standing(kept_model).facts.num_keep == KEEP, within=60)
    await real_ollama.fresh_slot()
    options = {"num_ctx": C, "num_predict": 4, "temperature": 0}
    chat = {"model": kept_model, "messages": [{"role": "user", "content": LONG}],
            "stream": False, "options": options}  # fmt: skip
    reply = await call(tapped.url, "POST", "/api/chat", chat)
    found = (await last_record(tapped))["truncation"]
    assert found is not None
    if real_ollama.llama_server:
        error = orjson.loads(reply.json()["error"])["error"]
        assert (reply.status, error["n_ctx"]) == (400, 512)
        assert (found["rule"], found["kind"], found["context"]) == ("T3", "refused", C)
        assert "num_ctx 300, run in a slot of 512" in found["explanation"]
    else:
        assert reply.json()["prompt_eval_count"] == C
        assert (found["rule"], found["kind"], found["context"]) == ("T1", "prompt_truncated", C)
    await real_ollama.fresh_slot()
    generate = {"model": kept_model, "prompt": LONG, "stream": False, "options": options}
    reply = (await call(tapped.url, "POST", "/api/generate", generate)).json()
    assert reply["prompt_eval_count"] == real_ollama.kept(C)
    lost = len(reply["context"]) - (reply["prompt_eval_count"] + reply["eval_count"])
    found = (await last_record(tapped, 2))["truncation"]
    assert found is not None and (found["rule"], found["context"]) == ("T2", C)
    assert found["tokens_lost"] == lost > C // 4


async def counting(proxy: Proxy, num_predict: int = 120, **extra: Any) -> dict[str, Any]:
    body = {
        "model": MODEL, "prompt": COUNTING, "raw": True, "stream": False,
        "options": {"num_ctx": C, "num_predict": num_predict, "temperature": 0}, **extra,
    }  # fmt: skip
    reply = await call(proxy.url, "POST", "/api/generate", body)
    assert reply.status == 200, reply.body
    found: dict[str, Any] = reply.json()
    return found


@BOTH_RELEASES
async def test_a_reply_past_c_shifts_on_the_go_runner_and_not_in_a_padded_slot(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """P + E past 300 and under 512: the Go runner shifted its cache, and T7 says so against
    C itself; v0.30.0's llama-server ran it in a 512-token slot, where nothing shifted, and
    the proxy (which pads as llama.cpp does) gives no verdict."""
    await real_ollama.fresh_slot()
    reply = await counting(tapped)
    total = reply["prompt_eval_count"] + reply["eval_count"]
    assert C < total <= 512, reply
    found = (await last_record(tapped))["truncation"]
    if real_ollama.llama_server:
        assert found is None, found
        return
    assert found is not None
    assert (found["rule"], found["kind"], found["context"]) == ("T7", "context_shift", C)
    assert found["prompt_tokens"] == reply["prompt_eval_count"]


@BOTH_RELEASES
async def test_shift_false_stops_at_the_slot_and_t8_says_so(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """With `shift: false` the reply stops once prompt and output fill the slot: C on the Go
    runner, C padded to 512 on v0.30.0; T8 says the context, not num_predict, cut it."""
    slot = 512 if real_ollama.llama_server else C
    await real_ollama.fresh_slot()
    reply = await counting(tapped, num_predict=slot, shift=False)
    total = reply["prompt_eval_count"] + reply.get("eval_count", 0)
    assert reply["done_reason"] == "length" and slot - 1 <= total <= slot, reply
    found = (await last_record(tapped))["truncation"]
    assert found is not None
    assert (found["rule"], found["kind"], found["context"]) == ("T8", "output_cut", C)


@BOTH_RELEASES
async def test_the_cached_count_is_recorded_as_ollama_reports_it(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """0.24 sends no `prompt_eval_cached_count`: the second, cache-hitting request reports the
    whole prompt again, and the proxy records the cached count as unknown (None), not 0, and
    counts no cached tokens. v0.30.0 sends none either, but its second `prompt_eval_count`
    leaves out the cached front: the same None, and no verdict from the smaller count."""
    await real_ollama.fresh_slot()
    body = {"model": MODEL, "prompt": LONG[:600], "stream": False,
            "options": {"num_predict": 2, "temperature": 0, "seed": 7}}  # fmt: skip
    replies = [(await call(tapped.url, "POST", "/api/generate", body)).json() for _ in range(2)]
    assert all("prompt_eval_cached_count" not in r for r in replies)
    first, second = (r["prompt_eval_count"] for r in replies)
    if real_ollama.llama_server:
        assert second < first, replies
    else:
        assert second == first
    await settled(tapped)
    recorded = await records(tapped, 2)
    assert [r["cached_tokens"] for r in recorded] == [None, None]
    assert [r["truncation"] for r in recorded] == [None, None]
    cached = [
        s.value
        for family in tapped.registry.collect()
        for s in family.samples
        if s.name == "ollama_tap_prompt_cached_tokens_total"
    ]
    assert cached == []


@BOTH_RELEASES
async def test_a_prompt_just_over_c_loses_only_the_overflow_and_t2_counts_it(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """Before 0.30.11 a cut drops only the overflow (N − C, N − C + 1 on v0.30.0), far under
    the C/4 that marks a cut on later versions: T2's version-gated branch (D ≥ 2 with P at
    the cut length) counts it exactly."""
    prompt = " ".join(f"item{i}" for i in range(150))
    options = {"num_ctx": 1024, "num_predict": 1, "temperature": 0}
    body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "stream": False, "options": options}
    await real_ollama.fresh_slot()
    whole = (await call(tapped.url, "POST", "/api/generate", body)).json()["prompt_eval_count"]
    c = whole - 20
    options["num_ctx"] = c
    await real_ollama.fresh_slot()
    reply = (await call(tapped.url, "POST", "/api/generate", body)).json()
    assert reply["prompt_eval_count"] == real_ollama.kept(c)
    lost = len(reply["context"]) - (reply["prompt_eval_count"] + reply["eval_count"])
    assert 2 <= lost <= c // 4, reply
    found = (await last_record(tapped, 2))["truncation"]
    assert found is not None
    assert (found["rule"], found["context"], found["tokens_lost"]) == ("T2", c, lost)


@BOTH_RELEASES
async def test_v1_options_are_ignored_by_ollama_and_by_the_rules(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """A /v1 body's `options.num_ctx` is no field of Ollama's compat structs: the reply runs
    in the default context, so a prompt far over the num_ctx asked is no truncation."""
    body = {
        "model": MODEL, "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "user", "content": LONG[:800]}], "options": {"num_ctx": 64},
    }  # fmt: skip
    reply = await call(tapped.url, "POST", "/v1/chat/completions", body)
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["prompt_tokens"] > 64
    assert (await last_record(tapped))["truncation"] is None

"""Metrics through the real proxy: injected delays come back as measured, rates as defined.

The fake Ollama injects a load, a parallel-slot wait (inside `total_duration` only), a prefill
and a per-token delay; the official clients drive the traffic. Timings are checked against
the injected truth within `TOL` (these are not benchmarks); everything Ollama reports is
checked exactly against the final object the client received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import ollama
import openai
import orjson
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ollama_tap.app import POLLER
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import (
    GEN,
    LLAMA,
    MESSAGES,
    QWEN,
    SLACK,
    TOL,
    counter,
    hist,
    native,
    near,
    samples,
    settled,
    took,
    upstream_polled,
)

LOAD, QUEUE, PREFILL, TOKEN = 0.3, 0.2, 0.1, 0.03
GAP_TOL = 0.015
"""Allowed distance between the mean inter-token gap and the injected token delay."""


# --- fidelity: injected delays come back, rates equal their definitions ------------------


async def _stream_native(
    client: ollama.AsyncClient, route: str, model: str, think: bool | None
) -> list[Any]:
    stream: AsyncIterator[Any]
    if route == "/api/generate":
        stream = await client.generate(model, "Why is the sky blue?", stream=True, think=think)
    else:
        stream = await client.chat(model, messages=MESSAGES, stream=True, think=think)
    return [part async for part in stream]


@pytest.mark.parametrize(
    ("route", "model", "thinking"),
    [
        ("/api/generate", LLAMA, []),
        ("/api/chat", LLAMA, []),
        ("/api/generate", QWEN, ["Rayleigh", " scattering", "?"]),
        ("/api/chat", QWEN, ["Rayleigh", " scattering", "?"]),
    ],
    ids=["generate", "chat", "generate-thinking", "chat-thinking"],
)
async def test_streamed_timings_match_the_injected_delays(
    proxy: Proxy, fake_ollama: FakeOllama, route: str, model: str, thinking: list[str]
) -> None:
    fake_ollama.script = Script(
        load_delay=LOAD,
        queue_delay=QUEUE,
        prefill_delay=PREFILL,
        token_delay=TOKEN,
        thinking=thinking,
    )
    client = ollama.AsyncClient(host=proxy.url)
    parts = await _stream_native(client, route, model, think=True if thinking else None)
    await settled(proxy)
    final = parts[-1]
    pieces = len(thinking) + len(fake_ollama.script.tokens)
    assert final.done and final.eval_count == pieces
    labels = native(route, model)
    streamed = native(route, model, "true")

    ttft_count, ttft = hist(proxy, "time_to_first_token_seconds", **labels)
    ttfc_count, ttfc = hist(proxy, "time_to_first_content_seconds", **labels)
    assert ttft_count == ttfc_count == 1
    # The fake's own first-token time: everything before its eval phase (queue is derived
    # as total − load − prompt_eval − eval), and its own mean gap between pieces.
    server_ttft = final.total_duration - final.eval_duration
    gap = final.eval_duration / 1e9 / (pieces - 1)
    assert took(ttft, server_ttft, LOAD + QUEUE + PREFILL), (ttft, server_ttft)
    assert near(ttfc, ttft + len(thinking) * gap, TOL / 2), (ttft, ttfc)
    if thinking:
        assert ttfc > ttft
    else:
        assert ttfc == ttft

    gaps, gap_sum = hist(proxy, "inter_token_latency_seconds", **labels)
    assert gaps == pieces - 1
    assert near(gap_sum / gaps, gap, GAP_TOL) and gap >= TOKEN - SLACK, (gap_sum / gaps, gap)
    rate_count, rate = hist(proxy, "observed_output_rate", **labels)
    assert rate_count == 1 and near(rate, 1 / gap, 0.25 / TOKEN), (rate, gap)
    duration_count, duration = hist(proxy, "request_duration_seconds", **streamed)
    assert duration_count == 1
    injected = LOAD + QUEUE + PREFILL + (pieces - 1) * TOKEN
    assert took(duration, final.total_duration, injected), (duration, final.total_duration)

    # Ollama's phases: exactly what the final object says, which the injected delays bound.
    phases = {
        "load_duration_seconds": (LOAD, final.load_duration),
        "prompt_eval_duration_seconds": (PREFILL, final.prompt_eval_duration),
        "eval_duration_seconds": ((pieces - 1) * TOKEN, final.eval_duration),
    }
    for name, (injected, reported) in phases.items():
        count, seconds = hist(proxy, name, **streamed)
        assert count == 1 and seconds == reported / 1e9, name
        assert seconds >= injected - SLACK, (name, seconds)
    accounted = final.load_duration + final.prompt_eval_duration + final.eval_duration
    queue_count, queue = hist(proxy, "queue_wait_seconds", **streamed)
    assert queue_count == 1 and queue == max(0, final.total_duration - accounted) / 1e9
    assert queue >= QUEUE - SLACK, queue

    # Rates and token counts: exactly their definitions over the reported figures.
    decode_count, decode = hist(proxy, "decode_tokens_per_second", **labels)
    assert decode_count == 1
    assert decode == final.eval_count / (final.eval_duration / 1e9)
    pair = {"model": model, "ctx": "le4k"}
    assert counter(proxy, "decode_tokens_total", **pair) == final.eval_count
    assert counter(proxy, "decode_seconds_total", **pair) == final.eval_duration / 1e9
    # This Ollama reports no prompt_eval_cached_count: no prefill rate, no prefill pair.
    assert hist(proxy, "prefill_tokens_per_second", **labels) == (0, 0)
    assert counter(proxy, "prefill_tokens_total", model=model) is None
    assert counter(proxy, "prefill_seconds_total", model=model) is None
    assert counter(proxy, "prompt_cached_tokens_total", **labels) is None
    assert counter(proxy, "prompt_tokens_total", **labels) == final.prompt_eval_count
    assert counter(proxy, "generation_tokens_total", **labels) == final.eval_count
    context = hist(proxy, "context_tokens", **labels)
    assert context == (1.0, final.prompt_eval_count + final.eval_count)

    assert counter(proxy, "requests_total", **labels, status="200") == 1
    assert counter(proxy, "responses_total", **labels, done_reason="stop") == 1
    assert samples(proxy, "ollama_tap_request_errors_total") == []


@pytest.mark.parametrize("route", ["/api/generate", "/api/chat"])
async def test_queue_wait_and_phases_for_unstreamed_replies(
    proxy: Proxy, fake_ollama: FakeOllama, route: str
) -> None:
    fake_ollama.script = Script(
        load_delay=LOAD, queue_delay=QUEUE, prefill_delay=PREFILL, token_delay=TOKEN
    )
    client = ollama.AsyncClient(host=proxy.url)
    if route == "/api/generate":
        final: Any = await client.generate("llama3.2", "Why is the sky blue?")
    else:
        final = await client.chat("llama3.2", messages=MESSAGES)
    await settled(proxy)
    labels = native(route, LLAMA)
    unstreamed = native(route, LLAMA, "false")
    queue_count, queue = hist(proxy, "queue_wait_seconds", **unstreamed)
    accounted = final.load_duration + final.prompt_eval_duration + final.eval_duration
    assert queue_count == 1 and queue == max(0, final.total_duration - accounted) / 1e9
    assert queue >= QUEUE - SLACK, queue
    load_count, load = hist(proxy, "load_duration_seconds", **unstreamed)
    assert load_count == 1 and load == final.load_duration / 1e9 and load >= LOAD - SLACK
    decode_count, decode = hist(proxy, "decode_tokens_per_second", **labels)
    assert decode_count == 1 and decode == final.eval_count / (final.eval_duration / 1e9)
    # Time to first token, content and the gaps belong to streamed replies only.
    for name in ("time_to_first_token_seconds", "time_to_first_content_seconds"):
        assert hist(proxy, name, **labels) == (0, 0), name
    assert hist(proxy, "inter_token_latency_seconds", **labels) == (0, 0)
    assert hist(proxy, "load_duration_seconds", **native(route, LLAMA, "true")) == (0, 0)
    duration_count, duration = hist(proxy, "request_duration_seconds", **unstreamed)
    injected = LOAD + QUEUE + PREFILL + 4 * TOKEN
    assert duration_count == 1 and took(duration, final.total_duration, injected)


async def _raw_generate(proxy: Proxy, body: dict[str, Any]) -> dict[str, Any]:
    """Stream /api/generate with aiohttp and return the final object as sent (all fields)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{proxy.url}/api/generate", json=body) as resp:
            lines = (await resp.read()).splitlines()
    final: dict[str, Any] = orjson.loads(lines[-1])
    assert final["done"] is True
    return final


GENERATE = {"model": "llama3.2", "prompt": "Why is the sky blue?"}


async def test_prefill_rate_from_the_cached_count(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(
        prefill_delay=0.05, token_delay=0.01, prompt_eval_count=26, prompt_eval_cached_count=20
    )
    final = await _raw_generate(proxy, GENERATE)
    await settled(proxy)
    processed = final["prompt_eval_count"] - final["prompt_eval_cached_count"]
    seconds = final["prompt_eval_duration"] / 1e9
    assert processed == 6
    assert hist(proxy, "prefill_tokens_per_second", **GEN) == (1, processed / seconds)
    assert counter(proxy, "prefill_tokens_total", model=LLAMA) == processed
    assert counter(proxy, "prefill_seconds_total", model=LLAMA) == seconds
    assert counter(proxy, "prompt_cached_tokens_total", **GEN) == 20
    assert counter(proxy, "prompt_tokens_total", **GEN) == 26


@pytest.mark.parametrize(
    ("script", "decode_rate", "decode_pair", "prefill"),
    [
        (Script(token_delay=0.01, eval_count=1), False, True, False),
        (Script(token_delay=0.01, zero_fields=("eval_duration",)), False, False, False),
        (Script(token_delay=0.0, tokens=["a", "b"]), False, True, False),
        (Script(token_delay=0.01, prompt_eval_cached_count=26), True, True, False),
        (Script(token_delay=0.01, prompt_eval_cached_count=0), True, True, True),
    ],
    ids=[
        "eval_count-1",
        "zero-eval_duration",
        "eval_duration-under-1ms",
        "all-cached",
        "cached-count-0",
    ],
)
async def test_rate_guards(
    proxy: Proxy,
    fake_ollama: FakeOllama,
    script: Script,
    decode_rate: bool,
    decode_pair: bool,
    prefill: bool,
) -> None:
    fake_ollama.script = script
    final = await _raw_generate(proxy, GENERATE)
    await settled(proxy)
    eval_count, eval_ns = final.get("eval_count", 0), final.get("eval_duration", 0)
    # The script really is one the guard applies to (a Ollama-reported fact, not a timing).
    assert decode_rate or eval_count < 2 or eval_ns < 1_000_000
    expected_rate: tuple[float, float] = (
        (1, eval_count / (eval_ns / 1e9)) if decode_rate else (0, 0)
    )
    assert hist(proxy, "decode_tokens_per_second", **GEN) == expected_rate
    pair = {"model": LLAMA, "ctx": "le4k"}
    if decode_pair:
        assert counter(proxy, "decode_tokens_total", **pair) == eval_count
        assert counter(proxy, "decode_seconds_total", **pair) == eval_ns / 1e9
    else:
        assert counter(proxy, "decode_tokens_total", **pair) is None
        assert counter(proxy, "decode_seconds_total", **pair) is None
    prefill_rate = hist(proxy, "prefill_tokens_per_second", **GEN)
    if prefill:
        seconds = final["prompt_eval_duration"] / 1e9
        assert prefill_rate == (1.0, final["prompt_eval_count"] / seconds)
    else:
        assert prefill_rate == (0.0, 0.0)
        assert counter(proxy, "prefill_tokens_total", model=LLAMA) is None
    # Token counts come from every reply, whatever the guards decided.
    assert counter(proxy, "generation_tokens_total", **GEN) == eval_count
    assert counter(proxy, "requests_total", **GEN, status="200") == 1


# --- context utilization: the runtime num_ctx, never the training length ------------------


async def test_context_utilization_from_num_ctx_then_from_api_ps(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    # /api/ps is read when the test says (after the start-up round), not on a period that
    # a slow exchange on a loaded machine would straddle.
    proxy = await proxy_factory(poll_interval=3600)
    await upstream_polled(proxy)
    poller = proxy.app[POLLER]
    client = ollama.AsyncClient(host=proxy.url)
    # Not loaded yet and no num_ctx: nothing to divide by, so no observation (and never
    # the model's training length, 131072 for llama3.2).
    first = await client.generate("llama3.2", "Why is the sky blue?", stream=True)
    parts = [part async for part in first]
    await settled(proxy)
    size = (parts[-1].prompt_eval_count or 0) + (parts[-1].eval_count or 0)
    assert hist(proxy, "context_utilization_ratio", **GEN) == (0, 0)
    assert hist(proxy, "context_tokens", **GEN) == (1, size)

    # The request's options.num_ctx wins; the fake loads the model with it.
    await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 8192})
    await settled(proxy)
    assert hist(proxy, "context_utilization_ratio", **GEN) == (1, size / 8192)

    # Without num_ctx, the loaded model's context_length from /api/ps.
    gauge = {"model": LLAMA}
    assert proxy.sample("ollama_tap_model_context_length", gauge) is None
    await poller.poll_ps()
    assert proxy.sample("ollama_tap_model_context_length", gauge) == 8192
    assert fake_ollama.models[LLAMA].model_info["llama.context_length"] == 131072
    await client.generate("llama3.2", "Why is the sky blue?")
    await settled(proxy)
    assert hist(proxy, "context_utilization_ratio", **GEN) == (2, 2 * size / 8192)

    # A request's num_ctx still wins over what /api/ps says.
    await client.chat("llama3.2", messages=MESSAGES, options={"num_ctx": 16})
    await settled(proxy)
    chat = native("/api/chat", LLAMA)
    count, ratio = hist(proxy, "context_utilization_ratio", **chat)
    assert count == 1 and ratio == size / 16 and ratio > 1  # context shift: it may exceed 1
    bucket = {**chat, "le": "1.0"}
    assert proxy.sample("ollama_tap_context_utilization_ratio_bucket", bucket) == 0


# --- model labels --------------------------------------------------------------------------


def label_values(proxy: Proxy, name: str = "ollama_tap_requests_total") -> set[str]:
    return {labels["model"] for labels, _ in samples(proxy, name)}


async def test_model_labels_are_canonical_and_unknown_names_other(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(model_label_cap=2)
    await upstream_polled(proxy)
    client = ollama.AsyncClient(host=proxy.url)
    for name in ("llama3.2", "llama3.2:latest", "LLAMA3.2", "registry.ollama.ai/library/llama3.2"):
        await client.generate(name, "hi")
    for name in ("mystery-one", "mystery-two", "mystery-three", "Why is the sky blue?"):
        with pytest.raises(ollama.ResponseError):
            await client.generate(name, "hi")
    await settled(proxy)
    assert counter(proxy, "requests_total", **GEN, status="200") == 4
    unstreamed = native("/api/generate", LLAMA, "false")
    assert hist(proxy, "request_duration_seconds", **unstreamed)[0] == 4
    # Ollama answered 404: none of them takes a slot, a name Ollama would refuse neither.
    missing = {"endpoint": "/api/generate", "status": "404"}
    assert counter(proxy, "requests_total", **missing, model="other") == 4
    assert label_values(proxy) == {LLAMA, "other"}


# --- /metrics over HTTP, driven by the official clients ----------------------------------


def _figures(families: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in families
        for s in family.samples
    }


async def _scrape(proxy: Proxy, accept: str | None) -> tuple[str, str]:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{proxy.url}/metrics", headers=headers) as resp:
            assert resp.status == 200
            return resp.headers["Content-Type"], await resp.text()


async def test_metrics_endpoint_shows_the_official_clients_traffic(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    await upstream_polled(proxy)
    fake_ollama.script = Script(token_delay=0.01)
    native_client = ollama.AsyncClient(host=proxy.url)
    parts = [p async for p in await native_client.generate("llama3.2", "hi", stream=True)]
    final = parts[-1]
    assert final.eval_count and final.eval_duration and final.prompt_eval_count
    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama", max_retries=0)
    chunks = [
        chunk
        async for chunk in await oai.chat.completions.create(
            model="llama3.2",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    ]
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    await settled(proxy)

    gen = {("endpoint", "/api/generate"), ("model", LLAMA)}
    compat = {("endpoint", "/v1/chat/completions"), ("model", LLAMA)}
    # The counters name the client too (by User-Agent) and the location; the histograms never do.
    LOCAL = ("location", "local")
    gen_c = {*gen, ("client", "ollama-python"), LOCAL}
    compat_c = {*compat, ("client", "openai-python"), LOCAL}
    expected = {
        ("ollama_tap_upstream_up", frozenset()): 1.0,
        ("ollama_tap_upstream_info", frozenset({("version", "0.33.0-rc2")})): 1.0,
        ("ollama_tap_requests_total", frozenset({*gen_c, ("status", "200")})): 1.0,
        ("ollama_tap_requests_total", frozenset({*compat_c, ("status", "200")})): 1.0,
        ("ollama_tap_generation_tokens_total", frozenset(gen_c)): float(final.eval_count),
        ("ollama_tap_prompt_tokens_total", frozenset(gen_c)): float(final.prompt_eval_count),
        ("ollama_tap_generation_tokens_total", frozenset(compat_c)): float(usage.completion_tokens),
        ("ollama_tap_prompt_tokens_total", frozenset(compat_c)): float(usage.prompt_tokens),
        ("ollama_tap_time_to_first_token_seconds_count", frozenset(gen)): 1.0,
        ("ollama_tap_time_to_first_token_seconds_count", frozenset(compat)): 1.0,
        ("ollama_tap_inter_token_latency_seconds_count", frozenset(gen)): 4.0,
        ("ollama_tap_decode_tokens_per_second_sum", frozenset(gen)): final.eval_count
        / (final.eval_duration / 1e9),
        ("ollama_tap_responses_total", frozenset({*compat, ("done_reason", "stop")})): 1.0,
    }
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        content_type, text = await _scrape(proxy, accept)
        if accept is None:
            assert content_type.startswith("text/plain")
            figures = _figures(parse_text(text))
        else:
            assert content_type.startswith("application/openmetrics-text")
            assert text.endswith("# EOF\n")
            figures = _figures(parse_openmetrics(text))  # type: ignore[no-untyped-call]
        for key, value in expected.items():
            assert key in figures, (accept, key)
            assert figures[key] == value, (accept, key)
        # The registry and the exposition agree on every figure of the exchanges (the
        # recorder's queue and file size move on their own).
        for (name, labels), value in figures.items():
            live = name.startswith(("ollama_tap_recorder_", "ollama_tap_db_"))
            if name.startswith("ollama_tap_") and not name.endswith("_created") and not live:
                assert proxy.sample(name, dict(labels)) == value, (accept, name, labels)
        # The standard collectors ride along on the injected registry.
        assert any(name == "process_cpu_seconds_total" for name, _ in figures)
        assert any(name == "python_info" for name, _ in figures)

"""Every stream shape through the real proxy, as the outcome, status and done_reason counters
and the latency histograms see it."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import httpx
import ollama
import openai
import orjson
import pytest

from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import (
    GEN,
    LLAMA,
    MESSAGES,
    QWEN,
    SLACK,
    counter,
    hist,
    in_flight,
    native,
    near,
    samples,
    settled,
    within,
)
from tests.support.waiting import eventually

CHAT = native("/api/chat", LLAMA)


def errors(proxy: Proxy) -> dict[tuple[str, str], float]:
    """request_errors_total as {(endpoint, kind): value}."""
    return {
        (labels["endpoint"], labels["kind"]): value
        for labels, value in samples(proxy, "ollama_tap_request_errors_total")
    }


def done_reasons(proxy: Proxy) -> dict[tuple[str, str], float]:
    return {
        (labels["endpoint"], labels["done_reason"]): value
        for labels, value in samples(proxy, "ollama_tap_responses_total")
    }


async def _generate_stream(proxy: Proxy) -> list[Any]:
    client = ollama.AsyncClient(host=proxy.url)
    return [part async for part in await client.generate("llama3.2", "hi", stream=True)]


# --- native streams that end badly -------------------------------------------------------


async def test_mid_stream_error_line(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(error_after=2, token_delay=0.01)
    with pytest.raises(ollama.ResponseError, match="an error was encountered"):
        await _generate_stream(proxy)
    await settled(proxy)
    assert errors(proxy) == {("/api/generate", "stream_error"): 1}
    assert counter(proxy, "requests_total", **GEN, status="200") == 1
    assert done_reasons(proxy) == {}
    assert hist(proxy, "time_to_first_token_seconds", **GEN)[0] == 1
    assert hist(proxy, "inter_token_latency_seconds", **GEN)[0] == 1
    assert hist(proxy, "load_duration_seconds", **native("/api/generate", LLAMA, "true")) == (0, 0)


async def test_stream_without_final_object(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(no_final=True, token_delay=0.01)
    parts = await _generate_stream(proxy)
    assert parts and not parts[-1].done
    await settled(proxy)
    assert errors(proxy) == {("/api/generate", "incomplete"): 1}
    assert counter(proxy, "requests_total", **GEN, status="200") == 1
    assert done_reasons(proxy) == {}
    assert counter(proxy, "generation_tokens_total", **GEN) is None
    assert hist(proxy, "decode_tokens_per_second", **GEN) == (0, 0)
    assert hist(proxy, "time_to_first_token_seconds", **GEN)[0] == 1


async def test_upstream_dying_mid_stream(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(die_after=2, token_delay=0.01)
    # The proxy cuts the client's connection as the upstream cut its own.
    with pytest.raises(httpx.RemoteProtocolError):
        await _generate_stream(proxy)
    await settled(proxy)
    assert errors(proxy) == {("/api/generate", "incomplete"): 1}
    assert counter(proxy, "requests_total", **GEN, status="200") == 1
    assert done_reasons(proxy) == {}


@pytest.mark.parametrize("cancellation", [True, False], ids=["CancelledError", "ConnectionReset"])
async def test_client_disconnect_is_counted(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, cancellation: bool
) -> None:
    proxy = await proxy_factory(handler_cancellation=cancellation)
    fake_ollama.script = Script(tokens=[f" t{i}" for i in range(500)], token_delay=0.02)
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            f"{proxy.url}/api/generate", json={"model": "llama3.2", "prompt": "hi"}
        )
        await resp.content.readline()
        await resp.content.readline()
        assert resp.connection is not None and resp.connection.transport is not None
        resp.connection.transport.abort()
        resp.close()
    kind = ("/api/generate", "client_disconnected")
    await eventually(lambda: errors(proxy).get(kind) == 1)
    assert errors(proxy) == {kind: 1}
    assert counter(proxy, "requests_total", **GEN, status="200") == 1
    assert in_flight(proxy) == 0
    assert hist(proxy, "request_duration_seconds", **native("/api/generate", LLAMA, "true"))[0] == 1
    assert hist(proxy, "time_to_first_token_seconds", **GEN)[0] == 1
    assert done_reasons(proxy) == {}


# --- what counts as output -----------------------------------------------------------------


async def test_thinking_only_first_chunks(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    thinking = ["Hmm", ",", " light", " scatters"]
    fake_ollama.script = Script(thinking=thinking, token_delay=0.04)
    client = ollama.AsyncClient(host=proxy.url)
    parts = [p async for p in await client.generate(QWEN, "hi", think=True, stream=True)]
    assert parts[0].thinking and not parts[0].response
    await settled(proxy)
    labels = native("/api/generate", QWEN)
    ttft_count, ttft = hist(proxy, "time_to_first_token_seconds", **labels)
    ttfc_count, ttfc = hist(proxy, "time_to_first_content_seconds", **labels)
    assert ttft_count == ttfc_count == 1
    # Thinking tokens are output (and decode): every piece is in the gaps and the rate.
    pieces = len(thinking) + len(fake_ollama.script.tokens)
    gap = parts[-1].eval_duration / 1e9 / (pieces - 1)  # the fake's own, overruns included
    assert ttfc > ttft and near(ttfc - ttft, len(thinking) * gap, 0.03)
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] == pieces - 1
    assert counter(proxy, "generation_tokens_total", **labels) == parts[-1].eval_count == pieces


async def test_tool_calls_on_the_final_object(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    fake_ollama.script = Script(
        tokens=[], tool_calls=[call], tool_calls_on_final=True, prefill_delay=0.05
    )
    client = ollama.AsyncClient(host=proxy.url)
    parts = [p async for p in await client.chat("llama3.2", messages=MESSAGES, stream=True)]
    final = parts[-1]
    assert final.done and final.message.tool_calls and not final.message.content
    assert not any(p.message.content or p.message.tool_calls for p in parts[:-1])
    await settled(proxy)
    ttft_count, ttft = hist(proxy, "time_to_first_token_seconds", **CHAT)
    assert ttft_count == 1 and ttft >= 0.05
    assert hist(proxy, "time_to_first_content_seconds", **CHAT) == (1, ttft)
    assert hist(proxy, "inter_token_latency_seconds", **CHAT) == (0, 0)
    assert counter(proxy, "generation_tokens_total", **CHAT) == final.eval_count == 1
    assert counter(proxy, "responses_total", **CHAT, done_reason="stop") == 1
    assert errors(proxy) == {}


# --- the compatibility layers ------------------------------------------------------------


def _openai(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama", max_retries=0)


async def test_openai_chat_stream_with_a_usage_only_chunk(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = Script(thinking=["Hmm"], token_delay=0.02, load_delay=0.05)
    stream = await _openai(proxy).chat.completions.create(
        model="llama3.2",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    await settled(proxy)
    labels = native("/v1/chat/completions", LLAMA)
    assert counter(proxy, "prompt_tokens_total", **labels) == usage.prompt_tokens == 26
    assert counter(proxy, "generation_tokens_total", **labels) == usage.completion_tokens == 6
    assert counter(proxy, "responses_total", **labels, done_reason="stop") == 1
    assert counter(proxy, "requests_total", **labels, status="200") == 1
    ttft_count, ttft = hist(proxy, "time_to_first_token_seconds", **labels)
    ttfc_count, ttfc = hist(proxy, "time_to_first_content_seconds", **labels)
    assert ttft_count == ttfc_count == 1 and ttfc > ttft >= 0.05
    # Reasoning plus five content deltas; the role-only and usage-only chunks are not output.
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] == 5
    assert hist(proxy, "observed_output_rate", **labels)[0] == 1
    # No native timings on /v1: no phases, no decode rate, no context.
    for name in ("decode_tokens_per_second", "context_tokens", "context_utilization_ratio"):
        assert hist(proxy, name, **labels) == (0, 0), name
    assert hist(proxy, "load_duration_seconds", **labels, stream="true") == (0, 0)
    assert errors(proxy) == {}


async def test_openai_chat_stream_without_usage_counts_no_tokens(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    stream = await _openai(proxy).chat.completions.create(
        model="llama3.2", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert [c async for c in stream]
    await settled(proxy)
    labels = native("/v1/chat/completions", LLAMA)
    assert counter(proxy, "generation_tokens_total", **labels) is None
    assert counter(proxy, "responses_total", **labels, done_reason="stop") == 1
    assert errors(proxy) == {}


async def test_openai_completions_stream_with_zero_usage_on_every_chunk(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = Script(token_delay=0.01)
    stream = await _openai(proxy).completions.create(
        model="llama3.2", prompt="hi", stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    zero = [c for c in chunks if c.choices]
    assert zero and all(c.usage is not None and c.usage.total_tokens == 0 for c in zero)
    usage = chunks[-1].usage
    assert usage is not None and usage.total_tokens > 0
    await settled(proxy)
    labels = native("/v1/completions", LLAMA)
    assert counter(proxy, "prompt_tokens_total", **labels) == usage.prompt_tokens == 26
    assert counter(proxy, "generation_tokens_total", **labels) == usage.completion_tokens == 5
    # Five tokens are five output events: the finish chunk (text "" and a zero usage) is not.
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] == 4
    assert hist(proxy, "time_to_first_token_seconds", **labels)[0] == 1
    assert counter(proxy, "responses_total", **labels, done_reason="stop") == 1
    assert errors(proxy) == {}


async def test_anthropic_messages_usage_from_message_delta(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = Script(token_delay=0.01)
    body = {
        "model": "llama3.2",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "Why is the sky blue? " * 20}],
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{proxy.url}/v1/messages", json=body) as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            text = await resp.text()
    events = [
        orjson.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ")
    ]
    estimate = events[0]["message"]["usage"]["input_tokens"]
    usage = next(e["usage"] for e in events if e["type"] == "message_delta")
    assert estimate != usage["input_tokens"] == 26
    await settled(proxy)
    labels = native("/v1/messages", LLAMA)
    assert counter(proxy, "prompt_tokens_total", **labels) == 26
    assert counter(proxy, "generation_tokens_total", **labels) == usage["output_tokens"] == 5
    assert counter(proxy, "responses_total", **labels, done_reason="end_turn") == 1
    assert hist(proxy, "time_to_first_token_seconds", **labels)[0] == 1
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] == 4
    assert errors(proxy) == {}


# --- replies that are not generations ----------------------------------------------------


async def test_load_and_unload_replies_count_by_done_reason_only(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = Script(load_delay=0.05)
    client = ollama.AsyncClient(host=proxy.url)
    loaded = await client.generate("llama3.2")
    unloaded = await client.generate("llama3.2", keep_alive=0)
    chat_loaded = await client.chat("llama3.2")
    assert (loaded.done_reason, unloaded.done_reason) == ("load", "unload")
    assert chat_loaded.done_reason == "load"
    await settled(proxy)
    assert done_reasons(proxy) == {
        ("/api/generate", "load"): 1,
        ("/api/generate", "unload"): 1,
        ("/api/chat", "load"): 1,
    }
    assert counter(proxy, "requests_total", **GEN, status="200") == 2
    assert counter(proxy, "requests_total", **CHAT, status="200") == 1
    for name in (
        "ollama_tap_request_duration_seconds_count",
        "ollama_tap_load_duration_seconds_count",
        "ollama_tap_queue_wait_seconds_count",
        "ollama_tap_decode_tokens_per_second_count",
        "ollama_tap_context_tokens_count",
        "ollama_tap_prompt_tokens_total",
        "ollama_tap_generation_tokens_total",
        "ollama_tap_decode_tokens_total",
    ):
        assert samples(proxy, name) == [], name
    assert errors(proxy) == {}


async def test_embeddings_duration_load_and_prompt_tokens(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.script = Script(load_delay=0.2, queue_delay=0.05)
    began = time.monotonic()
    reply = await ollama.AsyncClient(host=proxy.url).embed("all-minilm", ["a b", "c"])
    client = time.monotonic() - began
    oai = await _openai(proxy).embeddings.create(model="all-minilm", input="Why is the sky blue?")
    await settled(proxy)
    model = "all-minilm:latest"
    labels = native("/api/embed", model)
    count, duration = hist(proxy, "request_duration_seconds", **labels, stream="false")
    assert reply.total_duration is not None
    assert count == 1 and within(duration, reply.total_duration, client), (duration, client)
    assert duration >= 0.25 - SLACK
    assert reply.load_duration is not None and reply.prompt_eval_count is not None
    load = hist(proxy, "load_duration_seconds", **labels, stream="false")
    assert load == (1.0, reply.load_duration / 1e9)
    assert load[1] >= 0.2 - SLACK
    assert counter(proxy, "prompt_tokens_total", **labels) == reply.prompt_eval_count
    v1 = native("/v1/embeddings", model)
    assert hist(proxy, "request_duration_seconds", **v1, stream="false")[0] == 1
    assert counter(proxy, "prompt_tokens_total", **v1) == oai.usage.prompt_tokens
    # No rates, no queue (embeddings report no prefill/decode split), no utilization.
    for name in (
        "ollama_tap_queue_wait_seconds_count",
        "ollama_tap_decode_tokens_per_second_count",
        "ollama_tap_prefill_tokens_per_second_count",
        "ollama_tap_context_tokens_count",
        "ollama_tap_context_utilization_ratio_count",
        "ollama_tap_time_to_first_token_seconds_count",
        "ollama_tap_decode_tokens_total",
    ):
        assert samples(proxy, name) == [], name
    assert errors(proxy) == {}


async def test_server_busy_503(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    message = "server busy, please try again.  maximum pending requests exceeded"
    fake_ollama.script = Script(status_error=(503, message))
    with pytest.raises(ollama.ResponseError) as busy:
        await _generate_stream(proxy)
    assert busy.value.status_code == 503
    await settled(proxy)
    assert counter(proxy, "requests_total", **GEN, status="503") == 1
    assert errors(proxy) == {("/api/generate", "upstream_error"): 1}
    assert hist(proxy, "time_to_first_token_seconds", **GEN) == (0, 0)
    assert done_reasons(proxy) == {}


async def test_openai_responses_stream(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(token_delay=0.01)
    stream = await _openai(proxy).responses.create(model="llama3.2", input="hi", stream=True)
    events = [event async for event in stream]
    completed = events[-1]
    assert completed.type == "response.completed"
    usage = completed.response.usage
    assert usage is not None
    await settled(proxy)
    labels = native("/v1/responses", LLAMA)
    assert counter(proxy, "prompt_tokens_total", **labels) == usage.input_tokens == 26
    assert counter(proxy, "generation_tokens_total", **labels) == usage.output_tokens == 5
    assert counter(proxy, "responses_total", **labels, done_reason="completed") == 1
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] == 4
    assert errors(proxy) == {}


async def test_cold_start_reads_api_ps_again(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    # Polls every minute: only the read a cold start asks for can show the new num_ctx soon.
    proxy = await proxy_factory(poll_interval=60)
    await eventually(lambda: proxy.sample("ollama_tap_upstream_up") == 1)
    fake_ollama.script = Script(load_delay=1.05)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llama3.2", "hi", options={"num_ctx": 8192})
    await settled(proxy)
    assert counter(proxy, "cold_starts_total", model=LLAMA) == 1
    gauge = {"model": LLAMA}
    await eventually(lambda: proxy.sample("ollama_tap_model_context_length", gauge) == 8192)
    fake_ollama.script = Script()
    await client.generate("llama3.2", "hi")
    await settled(proxy)
    count, ratio = hist(proxy, "context_utilization_ratio", **GEN)
    assert count == 2 and ratio == 2 * 31 / 8192
    assert counter(proxy, "cold_starts_total", model=LLAMA) == 1

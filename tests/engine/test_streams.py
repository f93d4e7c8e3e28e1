"""Streams from a real engine, through the proxy, with the official clients: the same bytes as
direct, the TTFT the client's stopwatch sees, the token counts the engine reports."""

from __future__ import annotations

import re
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from tests.conftest import Proxy
from tests.engine.conftest import (
    MODEL,
    Engine,
    anthropic_client,
    events,
    openai_client,
    proxy_metrics,
    total,
)
from tests.support.metrics import settled
from tests.support.transparency import comparable

# What differs between two runs of one request only because it is another run: ids, clocks,
# and llama.cpp's timings object (flat, so no nested braces).
_VOLATILE = re.compile(rb'"(?:id|created)":(?:"[^"]*"|\d+)|"timings":\{[^{}]*\}')

GREEDY: dict[str, Any] = {"temperature": 0, "seed": 7}
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]

Raw = AbstractAsyncContextManager[Any]
"""A client's `with_streaming_response` call: the reply before the client parses it."""


def chat(base: str) -> Raw:
    return openai_client(base).chat.completions.with_streaming_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True}, **GREEDY,
    )  # fmt: skip


def completion(base: str) -> Raw:
    return openai_client(base).completions.with_streaming_response.create(
        model=MODEL, prompt="The capital of France is", max_tokens=12, stream=True,
        stream_options={"include_usage": True}, **GREEDY,
    )  # fmt: skip


def message(base: str) -> Raw:
    return anthropic_client(base).messages.with_streaming_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, stream=True,  # type: ignore[arg-type]
        temperature=0,
    )  # fmt: skip


ROUTES = {"/v1/chat/completions": chat, "/v1/completions": completion, "/v1/messages": message}


async def fetch(call: Raw) -> tuple[int, list[tuple[str, str]], bytes]:
    async with call as response:
        body = b"".join([chunk async for chunk in response.iter_bytes()])
        return response.status_code, response.headers.multi_items(), body


@pytest.mark.parametrize("endpoint", ROUTES)
async def test_a_stream_is_the_bytes_the_engine_sends(
    endpoint: str, engine: Engine, tapped: Proxy
) -> None:
    direct = await fetch(ROUTES[endpoint](engine.url))
    relayed = await fetch(ROUTES[endpoint](tapped.url))
    assert relayed[0] == direct[0] == 200
    assert comparable(relayed[1]) == comparable(direct[1])
    assert len(events(direct[2])) > 3  # a real stream, not one object
    assert _VOLATILE.sub(b"", relayed[2]) == _VOLATILE.sub(b"", direct[2])


def _output(endpoint: str, event: Any) -> bool:
    """Whether an event carries generated text (the README's definition of output)."""
    if endpoint == "/v1/messages":
        return bool(event.get("type") == "content_block_delta")
    choices = event.get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content") or choices[0].get("text"))


async def _first_output(endpoint: str, base: str) -> tuple[float, list[Any]]:
    """Seconds from the call to the first output event as the client reads it, and every
    event of the stream."""
    started = time.monotonic()
    first, seen = None, []
    async with ROUTES[endpoint](base) as response:
        async for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            seen += events(line.encode())
            if first is None and _output(endpoint, seen[-1]):
                first = time.monotonic() - started
    assert first is not None, seen
    return first, seen


@pytest.mark.parametrize("endpoint", ROUTES)
async def test_ttft_is_the_clients_stopwatch(endpoint: str, tapped: Proxy) -> None:
    client_ttft, _ = await _first_output(endpoint, tapped.url)
    await settled(tapped)
    scraped = await proxy_metrics(tapped)
    assert total(scraped, "ollama_tap_time_to_first_token_seconds_count", endpoint=endpoint) == 1
    proxy_ttft = total(scraped, "ollama_tap_time_to_first_token_seconds_sum", endpoint=endpoint)
    # The client's watch starts before the request is sent and stops after it parsed the
    # event: never shorter than the proxy's, and longer only by the trip through the client.
    assert 0 <= client_ttft - proxy_ttft < 0.010, (client_ttft, proxy_ttft)


def _usage(endpoint: str, seen: list[Any]) -> tuple[int, int]:
    """(prompt, generated) tokens as the engine reported them in the stream."""
    if endpoint == "/v1/messages":
        start = next(e for e in seen if e["type"] == "message_start")["message"]["usage"]
        end = next(e for e in seen if e["type"] == "message_delta")["usage"]
        return start["input_tokens"], end["output_tokens"]
    usage = next(e["usage"] for e in seen if e.get("usage"))
    return usage["prompt_tokens"], usage["completion_tokens"]


@pytest.mark.parametrize("endpoint", ROUTES)
async def test_token_counters_are_the_engines_usage(
    endpoint: str, engine: Engine, tapped: Proxy
) -> None:
    predicted = await engine.metric("llamacpp:tokens_predicted_total")
    _, seen = await _first_output(endpoint, tapped.url)
    prompt, generated = _usage(endpoint, seen)
    await settled(tapped)
    scraped = await proxy_metrics(tapped)
    assert generated > 0
    assert total(scraped, "ollama_tap_generation_tokens_total", endpoint=endpoint) == generated
    assert total(scraped, "ollama_tap_prompt_tokens_total", endpoint=endpoint) == prompt
    # The engine's own count of what it generated agrees with what it told the client.
    assert await engine.metric("llamacpp:tokens_predicted_total") - predicted == generated

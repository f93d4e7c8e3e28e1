"""Model label slots through the real proxy: only names Ollama lists or served get a series.

The fake Ollama answers 404 to names it does not have, on every route family, as Ollama
does; `unlisted` models it serves without listing them, as a list that lags would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import ollama
import openai
import pytest

from ollama_tap.names import ModelLabels
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.models import new_model
from tests.support.metrics import LLAMA, MESSAGES, QWEN, counter, hist, settled, upstream_polled
from tests.support.records import records
from tests.support.waiting import eventually

MINILM = "all-minilm:latest"
KNOWN = {LLAMA, QWEN, MINILM}
"""The fake's models, as /api/tags lists them."""
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/api/generate", {"prompt": "hi", "stream": False}),
    ("/api/chat", {"messages": MESSAGES, "stream": False}),
    ("/api/embed", {"input": "hi"}),
    ("/api/show", {}),
    ("/v1/chat/completions", {"messages": MESSAGES}),
    ("/v1/embeddings", {"input": "hi"}),
]
"""Routes that resolve the model before answering: unknown names get 404 on each."""
DAY = 86400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def model_values(proxy: Proxy) -> set[str]:
    """Every `model` label value on the proxy's registry, any family."""
    return {
        s.labels["model"]
        for family in proxy.registry.collect()
        for s in family.samples
        if "model" in s.labels
    }


async def flood(proxy: Proxy, count: int) -> list[int]:
    """`count` requests naming models nobody has, spread over ROUTES, 8 at a time."""
    limit = asyncio.Semaphore(8)

    async def one(session: aiohttp.ClientSession, i: int) -> int:
        route, body = ROUTES[i % len(ROUTES)]
        async with (
            limit,
            session.post(
                f"{proxy.url}{route}", json={"model": f"no-such-{i}:{i % 7}b", **body}
            ) as resp,
        ):
            await resp.read()
            return resp.status

    async with aiohttp.ClientSession() as session:
        return await asyncio.gather(*(one(session, i) for i in range(count)))


async def test_a_thousand_unknown_names_leave_only_known_names_and_other(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    # No poll after the first (besides the refreshes unknown names ask for): a name the
    # fake serves unlisted can only earn its slot by the proxy's own proof.
    proxy = await proxy_factory(poll_interval=3600)
    await upstream_polled(proxy)
    statuses = await flood(proxy, 1000)
    await settled(proxy)
    assert set(statuses) == {404}
    assert model_values(proxy) <= KNOWN | {"other"}
    assert counter(proxy, "requests_total", endpoint="/v1/embeddings", model="other", status="404")
    total = sum(
        s.value
        for family in proxy.registry.collect()
        for s in family.samples
        if s.name == "ollama_tap_requests_total"
    )
    assert total == 1000

    # A model pulled after the flood gets its own series (by the refresh or its first 200).
    fake_ollama.models["fresh:latest"] = new_model("fresh:latest")
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("fresh", "hi")
    await settled(proxy)
    gen = {"endpoint": "/api/generate", "model": "fresh:latest"}
    assert counter(proxy, "requests_total", **gen, status="200") == 1

    # A name answered 404 stays `other`, however often it comes; its records keep it.
    for _ in range(3):
        with pytest.raises(ollama.ResponseError):
            await client.generate("No-Such-1:1b", "hi")
    await settled(proxy)
    assert "no-such-1:1b" not in {v.lower() for v in model_values(proxy)}
    assert model_values(proxy) <= KNOWN | {"fresh:latest", "other"}
    kept = await records(proxy, 3, model="No-Such-1:1b")
    assert [r["model"] for r in kept] == ["No-Such-1:1b"] * 3, "as typed, made canonical"


async def test_the_exchange_that_proves_a_name_is_measured_under_it(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(poll_interval=3600)
    await upstream_polled(proxy)
    await flood(proxy, 60)
    fake_ollama.models["hidden:7b"] = new_model("hidden:7b")
    fake_ollama.unlisted.add("hidden:7b")
    fake_ollama.script = Script(token_delay=0.02)
    client = ollama.AsyncClient(host=proxy.url)
    stream = await client.generate("hidden:7b", "hi", stream=True)
    labels = {"endpoint": "/api/generate", "model": "hidden:7b"}
    in_flight: list[float | None] = []
    async for _ in stream:
        if not in_flight:  # the head has come: the 200 proved the name
            in_flight.append(proxy.sample("ollama_tap_requests_in_flight", labels))
    await settled(proxy)
    assert in_flight == [1.0], "in flight under its own name from the reply head on"
    assert counter(proxy, "requests_total", **labels, status="200") == 1
    assert hist(proxy, "time_to_first_token_seconds", **labels)[0] == 1
    assert hist(proxy, "inter_token_latency_seconds", **labels)[0] > 0
    other = {"endpoint": "/api/generate", "model": "other"}
    assert hist(proxy, "inter_token_latency_seconds", **other)[0] == 0
    assert counter(proxy, "requests_total", **other, status="200") is None
    listed = [m.model for m in (await client.list()).models]
    assert "hidden:7b" not in listed, "never listed: the 200 alone gave it its slot"

    # /v1 names the model by its id, natively it may go without its tag: one series.
    fake_ollama.models["hidden2:latest"] = new_model("hidden2:latest")
    fake_ollama.unlisted.add("hidden2:latest")
    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama", max_retries=0)
    await oai.chat.completions.create(
        model="hidden2:latest", messages=[{"role": "user", "content": "hi"}]
    )
    await client.chat("hidden2", messages=MESSAGES)
    await settled(proxy)
    v1 = {"endpoint": "/v1/chat/completions", "model": "hidden2:latest", "status": "200"}
    chat = {"endpoint": "/api/chat", "model": "hidden2:latest", "status": "200"}
    assert counter(proxy, "requests_total", **v1) == 1
    assert counter(proxy, "requests_total", **chat) == 1


async def test_a_deleted_models_series_go_after_a_day_of_nothing(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    clock = Clock()
    proxy = await proxy_factory(labels=ModelLabels(100, clock=clock))
    await upstream_polled(proxy)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("qwen3:8b", "hi")
    await client.delete("qwen3:8b")
    await eventually(lambda: proxy.sample("ollama_tap_model_info", _info(QWEN)) is None)
    with pytest.raises(ollama.ResponseError):
        await client.generate("qwen3:8b", "hi")
    await settled(proxy)
    gone = {"endpoint": "/api/generate", "model": QWEN}
    assert counter(proxy, "requests_total", **gone, status="404") == 1, "its slot is kept"

    clock.now += DAY - 1
    await asyncio.sleep(0.5)  # polls come and go: a day has not passed
    assert QWEN in model_values(proxy)
    clock.now += 1
    await eventually(lambda: QWEN not in model_values(proxy))
    assert LLAMA in model_values(proxy), "listed models keep theirs"
    with pytest.raises(ollama.ResponseError):
        await client.generate("qwen3:8b", "hi")
    await settled(proxy)
    other = {"endpoint": "/api/generate", "model": "other", "status": "404"}
    assert counter(proxy, "requests_total", **other) == 1
    assert QWEN not in model_values(proxy)


def _info(model: str) -> dict[str, str]:
    return {"model": model, "family": "qwen3", "parameter_size": "8.2B", "quantization": "Q4_K_M"}

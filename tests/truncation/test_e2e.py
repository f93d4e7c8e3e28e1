"""Truncation verdicts through the real proxy, the official clients against the fake Ollama
following Ollama's context rules (tests/support/fake_ollama/context.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import anthropic
import ollama
import openai
import pytest

from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.context import shift_limit
from tests.support.fake_ollama.models import model_details, new_model
from tests.support.metrics import LLAMA, counter, settled
from tests.support.records import AUTH, records
from tests.support.waiting import eventually

C = 4096
CTX = {"num_ctx": C}


@pytest.fixture
def fake(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.context_rules = True
    return fake_ollama


def words(n: int) -> str:
    """A prompt of exactly `n` of the fake's tokens."""
    return " ".join(["w"] * n)


def truncations(proxy: Proxy, endpoint: str, kind: str, model: str = LLAMA) -> float | None:
    return counter(proxy, "truncations_total", endpoint=endpoint, model=model, kind=kind)


def all_truncations(proxy: Proxy) -> float | None:
    return proxy.sample("ollama_tap_truncations_total")


async def one_record(proxy: Proxy) -> dict[str, Any]:
    found = await records(proxy, 1)
    assert len(found) == 1
    return found[0]


async def test_a_generate_prompt_longer_than_c_is_flagged_with_the_tokens_lost(
    proxy: Proxy, fake: FakeOllama
) -> None:
    reply = await ollama.AsyncClient(host=proxy.url).generate(LLAMA, words(5100), options=CTX)
    assert reply.prompt_eval_count == shift_limit(C, 4) == 2050
    await settled(proxy)
    assert truncations(proxy, "/api/generate", "prompt_truncated") == 1
    verdict = (await one_record(proxy))["truncation"]
    assert verdict["rule"] == "T2" and verdict["kind"] == "prompt_truncated"
    assert verdict["tokens_lost"] == 5100 - 2050 and verdict["context"] == C
    assert verdict["prompt_tokens"] == 2050
    assert "the first ≈3,050 tokens of this prompt were dropped" in verdict["explanation"]
    assert "it was 5,100 tokens, the runtime context 4,096" in verdict["explanation"]


async def test_a_chat_prompt_longer_than_c_is_flagged_by_t1(proxy: Proxy, fake: FakeOllama) -> None:
    messages = [{"role": "user", "content": words(6000)}]
    reply = await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages, options=CTX)
    assert reply.prompt_eval_count == 2050
    await settled(proxy)
    assert truncations(proxy, "/api/chat", "prompt_truncated") == 1
    verdict = (await one_record(proxy))["truncation"]
    assert (verdict["rule"], verdict["context"], verdict["tokens_lost"]) == ("T1", C, None)


async def _loaded(proxy: Proxy, fake: FakeOllama) -> None:
    """Load llama3.2 with C through the native API and wait until the poller has read it:
    /v1 requests cannot set num_ctx, so /api/ps is their only source of C, and only once a
    request that left num_ctx unset was seen loading the runner (its reply's load_duration
    over a second): a /v1 request runs with the automatic context."""
    fake.script.load_delay = 1.1
    await ollama.AsyncClient(host=proxy.url).generate(LLAMA, "hi")
    fake.script.load_delay = 0.0
    await eventually(lambda: proxy.sample("ollama_tap_model_context_length", {"model": LLAMA}) == C)


async def test_openai_and_anthropic_chats_are_judged_with_c_from_ps(
    proxy: Proxy, fake: FakeOllama
) -> None:
    await _loaded(proxy, fake)
    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama")
    done = await oai.chat.completions.create(
        model=LLAMA, messages=[{"role": "user", "content": words(5000)}]
    )
    assert done.usage is not None and done.usage.prompt_tokens == 2050
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="ollama")
    message = await client.messages.create(
        model=LLAMA, max_tokens=100, messages=[{"role": "user", "content": words(9000)}]
    )
    assert message.usage.input_tokens == 2050
    await settled(proxy)
    assert truncations(proxy, "/v1/chat/completions", "prompt_truncated") == 1
    assert truncations(proxy, "/v1/messages", "prompt_truncated") == 1


async def test_a_truncate_false_400_is_counted_as_refused(proxy: Proxy, fake: FakeOllama) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        await ollama.AsyncClient(host=proxy.url).embed(
            "all-minilm", words(600), truncate=False, options={"num_ctx": 256}
        )
    assert refused.value.status_code == 400
    async with aiohttp.ClientSession() as s:
        body = {"model": LLAMA, "prompt": words(5000), "truncate": False, "options": CTX}
        async with s.post(f"{proxy.url}/api/generate", json=body) as resp:
            assert resp.status == 400
            assert "exceed_context_size_error" in (await resp.json())["error"]
    await settled(proxy)
    assert truncations(proxy, "/api/embed", "refused", "all-minilm:latest") == 1
    assert truncations(proxy, "/api/generate", "refused") == 1
    by_endpoint = {r["endpoint"]: r["truncation"] for r in await records(proxy, 2)}
    assert by_endpoint["/api/generate"]["prompt_tokens"] == 5000
    assert by_endpoint["/api/generate"]["context"] == C
    assert by_endpoint["/api/embed"]["rule"] == "T3"


async def test_a_native_template_models_overflow_is_refused_through_v1(
    proxy: Proxy, fake: FakeOllama
) -> None:
    native = new_model("native:latest")
    native.template = ""  # llama-server applies the GGUF chat template: no stage 2
    fake.models[native.name] = native
    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        await oai.chat.completions.create(
            model="native", messages=[{"role": "user", "content": words(9000)}]
        )
    await settled(proxy)
    verdict = (await one_record(proxy))["truncation"]
    assert verdict["kind"] == "refused" and verdict["prompt_tokens"] == 9004
    assert verdict["context"] == 4096  # the n_ctx of llama-server's error, parsed


async def test_a_generation_past_c_is_a_context_shift(proxy: Proxy, fake: FakeOllama) -> None:
    fake.script = Script(eval_count=3000)
    reply = await ollama.AsyncClient(host=proxy.url).generate(LLAMA, words(2000), options=CTX)
    assert (reply.prompt_eval_count or 0) + (reply.eval_count or 0) > C
    await settled(proxy)
    assert truncations(proxy, "/api/generate", "context_shift") == 1
    verdict = (await one_record(proxy))["truncation"]
    assert verdict["rule"] == "T7" and "prompt 2,000 + output 3,000" in verdict["explanation"]


async def test_output_cut_by_the_context_with_shift_off_is_not_num_predict(
    proxy: Proxy, fake: FakeOllama
) -> None:
    deepseek = new_model("deepseek-v2:latest")
    deepseek.details = model_details("deepseek2", "16B", "Q4_0")
    fake.models[deepseek.name] = deepseek
    fake.script = Script(eval_count=3000)
    reply = await ollama.AsyncClient(host=proxy.url).chat(
        "deepseek-v2", [{"role": "user", "content": words(2000)}], options=CTX
    )
    assert reply.done_reason == "length"
    await settled(proxy)
    verdict = (await one_record(proxy))["truncation"]
    assert (verdict["kind"], verdict["rule"]) == ("output_cut", "T8")


async def test_a_length_stop_at_num_predict_is_not_a_context_cut(
    proxy: Proxy, fake: FakeOllama
) -> None:
    fake.script = Script(eval_count=95, done_reason="length")
    await ollama.AsyncClient(host=proxy.url).generate(
        LLAMA, words(4000), options={**CTX, "num_predict": 95}
    )
    await settled(proxy)
    assert all_truncations(proxy) is None


async def test_an_embedding_cut_to_its_context_is_flagged(proxy: Proxy, fake: FakeOllama) -> None:
    reply = await ollama.AsyncClient(host=proxy.url).embed(
        "all-minilm", words(1000), options={"num_ctx": 256}
    )
    assert reply.prompt_eval_count == 256
    await settled(proxy)
    assert truncations(proxy, "/api/embed", "embed_truncated", "all-minilm:latest") == 1


async def test_a_prompt_just_under_c_is_never_flagged(proxy: Proxy, fake: FakeOllama) -> None:
    fake.script = Script(tokens=["ok"])
    client = ollama.AsyncClient(host=proxy.url)
    generated = await client.generate(LLAMA, words(C - 1), options=CTX)
    chatted = await client.chat(LLAMA, [{"role": "user", "content": words(C - 1 - 4)}], options=CTX)
    assert generated.prompt_eval_count == chatted.prompt_eval_count == C - 1
    await settled(proxy)
    assert all_truncations(proxy) is None
    assert len(await records(proxy, 2)) == 2
    assert await records(proxy, 0, truncated="1") == []


async def test_200_ordinary_requests_of_varied_length_give_no_false_positive(
    proxy: Proxy, fake: FakeOllama
) -> None:
    """Lengths from 1 to C − 10 tokens (the reply's 5 tokens never reach C), through both
    native routes: T2 sees `context` on generate, T1 alone judges chat."""
    rng = random.Random(19)
    client = ollama.AsyncClient(host=proxy.url)

    async def one(i: int) -> None:
        n = rng.randint(1, C - 10)
        if i % 2:
            await client.generate(LLAMA, words(n), options=CTX)
        else:
            await client.chat(LLAMA, [{"role": "user", "content": words(n)}], options=CTX)

    for batch in range(20):
        await asyncio.gather(*(one(batch * 10 + i) for i in range(10)))
    await settled(proxy)
    assert counter(proxy, "requests_total", endpoint="/api/chat", model=LLAMA) == 100
    assert all_truncations(proxy) is None
    assert len(await records(proxy, 200, limit="1000")) == 200
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(f"{proxy.url}/_tap/api/records", params={"truncated": "1"}) as resp:
            assert (await resp.json())["records"] == []

"""The fake's scheduler follows Ollama's rules (research §7): reuse, reload, evict, expire."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.models import new_model
from tests.support.fake_ollama.scheduler import Scheduler

LLAMA, QWEN, TINY = "llama3.2:latest", "qwen3:8b", "tiny:latest"


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as s:
        yield s


def scheduled(fake: FakeOllama, max_loaded: int = 3) -> Scheduler:
    fake.scheduler = Scheduler(fake, max_loaded=max_loaded, load_seconds=0.05)
    return fake.scheduler


async def generate(
    session: aiohttp.ClientSession, fake: FakeOllama, model: str, **body: Any
) -> dict[str, Any]:
    payload = {"model": model, "prompt": "x", "stream": False, **body}
    async with session.post(fake.url + "/api/generate", json=payload) as resp:
        reply: dict[str, Any] = await resp.json()
    return reply


async def ps(session: aiohttp.ClientSession, fake: FakeOllama) -> dict[str, int]:
    async with session.get(fake.url + "/api/ps") as resp:
        return {m["name"]: m["context_length"] for m in (await resp.json())["models"]}


async def test_a_resident_runner_is_reused_unless_a_needs_reload_field_changes(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = scheduled(fake_ollama)
    await generate(session, fake_ollama, "llama3.2", options={"num_ctx": 4096})
    # keep_alive, sampling options and num_predict never reload (§7.2 "never").
    warm = await generate(
        session, fake_ollama, "llama3.2", keep_alive="10m",
        options={"num_ctx": 4096, "temperature": 0.1, "num_predict": 5, "num_keep": 8},
    )  # fmt: skip
    assert warm["load_duration"] < 0.05e9
    assert sched.loads == [LLAMA]
    for changed in ({"num_ctx": 8192}, {"num_ctx": 8192, "num_batch": 256},
                    {"num_ctx": 8192, "num_batch": 256, "num_gpu": 0}):  # fmt: skip
        reply = await generate(session, fake_ollama, "llama3.2", options=changed)
        assert reply["load_duration"] >= 0.05e9
    # A request with the default num_gpu never reloads; another `shift` does.
    await generate(session, fake_ollama, "llama3.2", options={"num_ctx": 8192, "num_batch": 256})
    assert len(sched.loads) == 4
    await generate(
        session, fake_ollama, "llama3.2", shift=False,
        options={"num_ctx": 8192, "num_batch": 256, "num_gpu": 0},
    )  # fmt: skip
    assert len(sched.loads) == 5
    assert await ps(session, fake_ollama) == {LLAMA: 8192}


async def test_num_ctx_is_capped_at_the_training_context_and_auto_matches_auto(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = scheduled(fake_ollama)
    await generate(session, fake_ollama, "qwen3:8b")
    await generate(session, fake_ollama, "qwen3:8b")
    assert await ps(session, fake_ollama) == {QWEN: 4096}
    # Explicit 4096 against an auto runner of 4096: the same effective context.
    await generate(session, fake_ollama, "qwen3:8b", options={"num_ctx": 4096})
    assert sched.loads == [QWEN]
    await generate(session, fake_ollama, "qwen3:8b", options={"num_ctx": 100_000})
    await generate(session, fake_ollama, "qwen3:8b", options={"num_ctx": 50_000})
    assert await ps(session, fake_ollama) == {QWEN: 40960}
    assert sched.loads == [QWEN, QWEN]


async def test_the_idle_runner_with_the_shortest_keep_alive_is_evicted(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    scheduled(fake_ollama, max_loaded=2)
    fake_ollama.models[TINY] = new_model(TINY)
    await generate(session, fake_ollama, "qwen3:8b", keep_alive="1h")
    await generate(session, fake_ollama, "llama3.2", keep_alive="10m")
    # llama3.2 was used last, but has the shortest keep_alive: not LRU (§7.3).
    await generate(session, fake_ollama, TINY, keep_alive="2h")
    assert set(await ps(session, fake_ollama)) == {QWEN, TINY}
    # Equal keep_alive: the blob path (the digest here) decides.
    await generate(session, fake_ollama, "qwen3:8b", keep_alive="2h")
    await generate(session, fake_ollama, "llama3.2", keep_alive="2h")
    digests = {name: fake_ollama.models[name].digest for name in (QWEN, TINY)}
    kept = max(digests, key=lambda name: digests[name])
    assert set(await ps(session, fake_ollama)) == {kept, LLAMA}


async def test_a_busy_victim_is_waited_for(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = scheduled(fake_ollama, max_loaded=1)
    fake_ollama.script.token_delay = 0.1
    slow = asyncio.create_task(generate(session, fake_ollama, "llama3.2"))
    await asyncio.sleep(0.2)
    fake_ollama.script.token_delay = 0.0
    other = await generate(session, fake_ollama, "qwen3:8b")
    done = await slow
    assert done["done"] and other["done"]
    assert sched.loads == [LLAMA, QWEN]
    assert await ps(session, fake_ollama) == {QWEN: 4096}


async def test_keep_alive_expiry_and_keep_alive_zero(
    fake_ollama: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = scheduled(fake_ollama)
    await generate(session, fake_ollama, "llama3.2", keep_alive="200ms")
    assert await ps(session, fake_ollama) == {LLAMA: 4096}
    await asyncio.sleep(0.3)
    assert await ps(session, fake_ollama) == {}
    await generate(session, fake_ollama, "llama3.2", keep_alive=0)
    assert await ps(session, fake_ollama) == {}
    # The default keep_alive (5 m), then an unload call with an empty prompt.
    await generate(session, fake_ollama, "llama3.2")
    assert await ps(session, fake_ollama) == {LLAMA: 4096}
    reply = await generate(session, fake_ollama, "llama3.2", prompt="", keep_alive=0)
    assert reply["done_reason"] == "unload"
    assert await ps(session, fake_ollama) == {}
    assert sched.loads == [LLAMA, LLAMA, LLAMA]

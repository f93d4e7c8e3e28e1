"""200 varied ordinary requests through the proxy, against the fake following Ollama's
scheduler and context rules on two versions: no truncation verdict and no phantom load.

Ordinary: every prompt plus its output fits the context the runner really has; clients mix
native and /v1 routes, several num_ctx (some not multiples of 256), num_keep, multi-turn
chats and embeddings, so runners reload under the proxy's feet between two /api/ps reads."""

from __future__ import annotations

import random
from typing import Any

import aiohttp
import pytest

from ollama_tap.app import LOADS, POLLER
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.metrics import LLAMA, settled
from tests.support.records import records
from tests.support.waiting import eventually

DEFAULT = 4096
"""The fake's llama3.2 default context: what a request (or any /v1 one) without num_ctx gets."""
OUTPUT = 5
"""The fake's scripted reply: five tokens."""


def words(n: int) -> str:
    return " ".join(["w"] * n)


def ordinary(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One request that fits its runner's context (stage 1 and 2 never act)."""
    kind = rng.choice(["generate", "chat", "history", "v1", "v1-text", "embed", "v1-embed"])
    num_ctx = rng.choice([None, 2048, 3000, 4096, 10000])
    c = num_ctx or DEFAULT
    room = c - OUTPUT - 10
    options: dict[str, Any] = {"num_ctx": num_ctx} if num_ctx else {}
    if rng.random() < 0.3:
        options["num_keep"] = rng.choice([0, 8, 64])
    if kind == "generate":
        return "/api/generate", {"model": LLAMA, "prompt": words(rng.randint(1, room)),
                                 "options": options}  # fmt: skip
    if kind == "chat":
        content = words(rng.randint(1, room - 4))
        return "/api/chat", {"model": LLAMA, "messages": [{"role": "user", "content": content}],
                             "options": options}  # fmt: skip
    if kind == "history":
        turns = rng.randint(2, 12)
        each = max(1, room // turns - 4)
        messages = [{"role": "system", "content": words(rng.randint(1, 20))}] + [
            {"role": "user" if i % 2 == 0 else "assistant", "content": words(rng.randint(1, each))}
            for i in range(turns - 1)
        ]
        return "/api/chat", {"model": LLAMA, "messages": messages, "options": options}
    v1_room = DEFAULT - OUTPUT - 10
    if kind == "v1":
        # /v1 bodies' options are ignored by Ollama: a small num_ctx here must not matter.
        content = words(rng.randint(1, v1_room - 4))
        return "/v1/chat/completions", {
            "model": LLAMA, "messages": [{"role": "user", "content": content}],
            "options": {"num_ctx": 1024},
        }  # fmt: skip
    if kind == "v1-text":
        return "/v1/completions", {"model": LLAMA, "prompt": words(rng.randint(1, v1_room))}
    embed_ctx = rng.choice([None, 256, 512])
    text = words(rng.randint(1, (embed_ctx or 256) - 20))
    if kind == "embed":
        opts = {"num_ctx": embed_ctx} if embed_ctx else {}
        return "/api/embed", {"model": "all-minilm", "input": text, "options": opts}
    return "/v1/embeddings", {"model": "all-minilm", "input": [text, "short"]}


@pytest.mark.parametrize("version", ["0.33.0-rc2", "0.30.5"])
async def test_200_varied_ordinary_requests_give_no_verdict_and_no_phantom_load(
    proxy: Proxy, fake_ollama: FakeOllama, version: str
) -> None:
    fake = fake_ollama
    fake.context_rules = True
    fake.version = version
    fake.scheduler = Scheduler(fake, load_seconds=0.03)
    # The rules a verdict applies are the version the poller last read; a request sent
    # before it reads the new one is judged by the old version's rules.
    await eventually(lambda: proxy.app[POLLER].version == version)
    rng = random.Random(f"ordinary-{version}")
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            path, body = ordinary(rng)
            async with s.post(f"{proxy.url}{path}", json={"stream": False, **body}) as resp:
                assert resp.status == 200, await resp.text()
    await settled(proxy)
    assert len(await records(proxy, 200, limit="1000")) == 200
    assert proxy.sample("ollama_tap_truncations_total") is None
    assert await records(proxy, 0, truncated="1") == []
    events = proxy.app[LOADS].recent()
    real = fake.scheduler.loads
    assert len([e for e in events if e["model"] == LLAMA]) <= real.count(LLAMA)
    assert not [e for e in events if e["cause"] in ("expired", "unloaded", "oom_flush")]

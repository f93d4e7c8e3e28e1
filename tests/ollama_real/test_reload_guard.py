"""`--reload-guard` in front of a real Ollama: a request for a smaller num_ctx than the
resident runner's is sent with the runner's, and the runner stays (no reload); a larger one
is sent as it came, and Ollama reloads."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ollama_tap.app import LOADS
from tests.conftest import MakeProxy, Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama, call
from tests.support.records import records
from tests.support.waiting import eventually

WITHIN = 60.0
"""Seconds a load may take to show: a load on a busy 2-core box, then a poll."""


@pytest.fixture
async def guarded(proxy_factory: MakeProxy, real_ollama: Ollama) -> Proxy:
    """A guarding proxy, started once nothing is resident and it has read /api/ps."""
    await real_ollama.unload_all()
    proxy = await proxy_factory(upstream=real_ollama.url, reload_guard=True)
    await eventually(lambda: proxy.app[LOADS].baselined, within=WITHIN)
    return proxy


async def generate(proxy: Proxy, num_ctx: int) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": "Hi.", "stream": False,
            "options": {"num_predict": 2, "num_ctx": num_ctx}}  # fmt: skip
    reply = await call(proxy.url, "POST", "/api/generate", body, {"X-Ollama-Tap-Client": "app"})
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


async def resident_context(real_ollama: Ollama) -> int:
    [row] = [r for r in await real_ollama.ps() if r["name"] == MODEL]
    return int(row["context_length"])


async def loaded_with(proxy: Proxy, real_ollama: Ollama, num_ctx: int) -> None:
    """MODEL resident with `num_ctx`, and the proxy knowing it (its load seen in /api/ps)."""
    await generate(proxy, num_ctx)
    assert await resident_context(real_ollama) == num_ctx
    tracker = proxy.app[LOADS]
    await eventually(
        lambda: any(e["context_length"] == num_ctx for e in tracker.recent(MODEL)), within=WITHIN
    )


@BOTH_RELEASES
async def test_a_smaller_num_ctx_keeps_the_resident_runner(
    guarded: Proxy, real_ollama: Ollama
) -> None:
    await loaded_with(guarded, real_ollama, 4096)
    loads_before = len(guarded.app[LOADS].recent(MODEL))

    await generate(guarded, 2048)
    await asyncio.sleep(1.0)  # two polls: a reload would be listed by now

    assert await resident_context(real_ollama) == 4096
    assert len(guarded.app[LOADS].recent(MODEL)) == loads_before
    assert guarded.sample("ollama_tap_reload_guard_rewrites_total", {"model": MODEL}) == 1
    newest = (await records(guarded, 2))[0]
    assert newest["reload_guard"]["changes"] == [{"field": "num_ctx", "from": 2048, "to": 4096}]


@BOTH_RELEASES
async def test_a_larger_num_ctx_reloads_as_asked(guarded: Proxy, real_ollama: Ollama) -> None:
    await loaded_with(guarded, real_ollama, 2048)
    await generate(guarded, 4096)

    assert await resident_context(real_ollama) == 4096
    assert guarded.sample("ollama_tap_reload_guard_rewrites_total", {"model": MODEL}) is None

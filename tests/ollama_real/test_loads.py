"""The scheduler as a real Ollama runs it, and the load events the proxy makes of it.

Each test starts a proxy in front of an Ollama with nothing resident (every model unloaded
directly first: a proxy that saw a model leave without a request of its own cannot say why,
so it must not have seen it), then drives one cause through it, the requests naming their
client by header. Ollama runs
with OLLAMA_MAX_LOADED_MODELS=1, so a second model's load really evicts the first.

Each cause runs on both releases, whose scheduler is the same on these paths (v0.30.0's
server/sched.go and routes.go cited): `keep_alive: 0` with no prompt expires the runner at
once (routes.go:415, `expireRunner` sched.go:1720) and answers `done_reason: "unload"`; an
idle runner's keep_alive arms a timer that sets `expires_at` (sched.go:389-401); at the
OLLAMA_MAX_LOADED_MODELS limit a new model unloads the idle one (sched.go:261-263,
`findRunnerToUnload`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from ollama_tap.app import LOADS, POLLER
from tests.conftest import MakeProxy, Proxy
from tests.ollama_real.conftest import AUTH, BOTH_RELEASES, MODEL, SECOND, Ollama, call
from tests.support.waiting import eventually

WITHIN = 60.0
"""Seconds a load event may take to show: a load on a busy 2-core box, then a poll."""


@pytest.fixture
async def tapped(proxy_factory: MakeProxy, real_ollama: Ollama) -> Proxy:
    """A proxy started once nothing is resident, and once it has read /api/ps: a load of
    Gemma 270M takes well under the second that makes a reply a cold start, so the proxy
    sees it in /api/ps, against a first read that must come before it."""
    await real_ollama.unload_all()
    proxy = await proxy_factory(upstream=real_ollama.url)
    await eventually(lambda: proxy.app[LOADS].baselined, within=WITHIN)
    return proxy


async def loads(proxy: Proxy, model: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession(headers=AUTH) as s,
        s.get(f"{proxy.url}/_tap/api/loads", params={"model": model}) as resp,
    ):
        assert resp.status == 200
        found: list[dict[str, Any]] = (await resp.json())["loads"]
        return found


async def load_event(proxy: Proxy, model: str, cause: str) -> dict[str, Any]:
    """The newest load event of `model` once it has this cause (bounded wait)."""
    events: list[dict[str, Any]] = []
    for _ in range(int(WITHIN / 0.1)):
        events = await loads(proxy, model)
        if events and events[0]["cause"] == cause:
            return events[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {cause} load of {model}; the events: {events}")


async def generate(proxy: Proxy, model: str, client: str, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "prompt": "Hi.", "stream": False, "options": {"num_predict": 2}}
    body.update(extra)
    reply = await call(proxy.url, "POST", "/api/generate", body, {"X-Ollama-Tap-Client": client})
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


async def gone(real_ollama: Ollama, model: str) -> None:
    for _ in range(int(WITHIN / 0.1)):
        if model not in [row["name"] for row in await real_ollama.ps()]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{model} still resident after {WITHIN:g} s")


@BOTH_RELEASES
async def test_a_first_load_is_named_with_its_client(tapped: Proxy, real_ollama: Ollama) -> None:
    await generate(tapped, MODEL, "alice")
    event = await load_event(tapped, MODEL, "first_load")
    assert event["client"] == "alice" and event["endpoint"] == "/api/generate"


@BOTH_RELEASES
async def test_a_new_num_ctx_reloads_with_options_changed(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """On both eras: 0.24's `needsReload` and 0.30's (which compares more fields, `shift`
    and `draft_num_predict` among them) both reload for a new num_ctx, and for nothing else
    these two requests differ in."""
    await generate(tapped, MODEL, "alice")
    await load_event(tapped, MODEL, "first_load")
    # The reply tells of the load before an /api/ps read lists the runner, and the proxy
    # predicts a reload only of a runner it has read.
    await eventually(lambda: tapped.app[POLLER].loaded(MODEL) is not None, within=WITHIN)
    await generate(tapped, MODEL, "bob", options={"num_ctx": 2048, "num_predict": 2})
    event = await load_event(tapped, MODEL, "options_changed")
    assert event["client"] == "bob"
    assert [c["field"] for c in event["changes"]] == ["num_ctx"]
    assert event["predicted"] is True


@BOTH_RELEASES
async def test_identical_requests_reuse_the_runner_with_one_load(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """Rule L0 d on both eras: the handler's own reads count in `load_duration` (v0.30.0
    opens the GGUF twice per request, server/images.go), so a reply on the runner the proxy
    saw loaded may pass the cold-start second with no load; four alike requests make the
    first load and nothing else."""
    replies = [await generate(tapped, MODEL, f"client{i}") for i in range(4)]
    await load_event(tapped, MODEL, "first_load")
    await asyncio.sleep(1.0)  # time for any event the last reply would have made
    events = await loads(tapped, MODEL)
    slow = [r["load_duration"] / 1e9 for r in replies[1:]]
    assert [e["cause"] for e in events] == ["first_load"], (events, slow)


@BOTH_RELEASES
async def test_keep_alive_zero_unloads_and_the_next_load_says_who(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """On v0.24.0 Gemma reloads in under the second that makes a reply a cold start: the
    proxy sees the load only in the next /api/ps read, after the request ended, and names
    that request as its trigger (rule L0)."""
    await generate(tapped, MODEL, "alice")
    await load_event(tapped, MODEL, "first_load")
    unloading = {"model": MODEL, "keep_alive": 0}
    reply = await call(
        tapped.url, "POST", "/api/generate", unloading, {"X-Ollama-Tap-Client": "carol"}
    )
    assert reply.json()["done_reason"] == "unload"
    await gone(real_ollama, MODEL)
    await generate(tapped, MODEL, "dave")
    event = await load_event(tapped, MODEL, "unloaded")
    assert event["client"] == "dave" and event["by_request"] is not None
    assert "from carol" in event["detail"]


@BOTH_RELEASES
async def test_a_short_keep_alive_expires_and_the_next_load_says_so(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """The next request comes as soon as Ollama has dropped the model, before the proxy's
    next /api/ps read: it still finds the runner listed, with an `expires_at` just past."""
    await generate(tapped, MODEL, "alice", keep_alive="1s")
    await load_event(tapped, MODEL, "first_load")
    await gone(real_ollama, MODEL)
    await generate(tapped, MODEL, "erin")
    event = await load_event(tapped, MODEL, "expired")
    assert event["client"] == "erin"


@BOTH_RELEASES
async def test_the_other_model_evicts_and_the_return_says_by_whom(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    await generate(tapped, MODEL, "alice")
    await load_event(tapped, MODEL, "first_load")
    await generate(tapped, SECOND, "frank")
    loaded = await load_event(tapped, SECOND, "first_load")
    assert loaded["client"] == "frank"
    assert [row["name"] for row in await real_ollama.ps()] == [SECOND]
    await generate(tapped, MODEL, "grace")
    event = await load_event(tapped, MODEL, "evicted")
    assert event["client"] == "grace" and event["by"] == SECOND

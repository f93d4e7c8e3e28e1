"""Load causes a CPU Ollama 0.24 can produce beyond test_loads.py: a Modelfile variant sharing
its original's runner, and a runner replaced by a client that bypasses the proxy (L0:
/api/ps lists it with another `context_length`).

Ollama keys runners by the weights' blob (`server/sched.go` `s.loaded[model.ModelPath]`): a
variant made `FROM` a model (its own manifest and digest, the same blob) that changes no
runner option is served by the runner its original loaded, with no load. A request with
another `num_ctx` replaces the runner (`needsReload`) whoever sends it; the proxy sees only
/api/ps change, and cannot say why.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final

import aiohttp
import pytest

from ollama_tap.app import LOADS, POLLER
from tests.conftest import MakeProxy, Proxy
from tests.ollama_real.conftest import AUTH, BOTH_RELEASES, MODEL, Ollama, call
from tests.support.metrics import settled
from tests.support.records import records
from tests.support.waiting import eventually

WITHIN: Final = 60.0
"""Seconds a load may take to show: a load on a busy 2-core box, then a poll."""
VARIANT: Final = "gemma3-warm:270m"
"""MODEL with a Modelfile `PARAMETER temperature 0.3`: a sampling option, no runner option."""


@pytest.fixture
async def watching(proxy_factory: MakeProxy, real_ollama: Ollama) -> Proxy:
    """A proxy started once nothing is resident, after its first /api/ps read (a load it
    sees must come after its baseline)."""
    await real_ollama.unload_all()
    proxy = await proxy_factory(upstream=real_ollama.url)
    await eventually(lambda: proxy.app[LOADS].baselined, within=WITHIN)
    return proxy


@pytest.fixture
async def variant(real_ollama: Ollama) -> AsyncIterator[str]:
    modelfile = real_ollama.log.parent / "warm.Modelfile"
    modelfile.write_text(f"FROM {MODEL}\nPARAMETER temperature 0.3\n")
    done = real_ollama.cli("create", VARIANT, "-f", str(modelfile))
    assert done.returncode == 0, done.stderr
    yield VARIANT
    real_ollama.cli("rm", VARIANT)


async def loads(proxy: Proxy, model: str | None = None) -> list[dict[str, Any]]:
    params = {"model": model} if model else {}
    async with (
        aiohttp.ClientSession(headers=AUTH) as s,
        s.get(f"{proxy.url}/_tap/api/loads", params=params) as resp,
    ):
        found: list[dict[str, Any]] = (await resp.json())["loads"]
        return found


async def generate(base: str, model: str, **options: Any) -> None:
    body = {"model": model, "prompt": "Hi.", "stream": False,
            "options": {"num_predict": 2, **options}}  # fmt: skip
    reply = await call(base, "POST", "/api/generate", body)
    assert reply.status == 200, reply.body


async def first_load(proxy: Proxy) -> dict[str, Any]:
    await generate(proxy.url, MODEL)
    await eventually(lambda: bool(proxy.app[LOADS].recent(MODEL, 1, with_client=True)),
                     within=WITHIN)  # fmt: skip
    [event] = await loads(proxy, MODEL)
    assert event["cause"] == "first_load", event
    return event


@BOTH_RELEASES
async def test_a_variant_is_served_by_its_originals_runner_with_no_load(
    watching: Proxy, real_ollama: Ollama, variant: str
) -> None:
    poller = watching.app[POLLER]

    def one_runner() -> bool:
        # The proxy keys runners as Ollama does once /api/show names the variant's blob.
        digests = poller.digest_of(variant), poller.digest_of(MODEL)
        keys = {poller.runner_key(d) for d in digests}
        return None not in digests and len(keys) == 1

    await eventually(one_runner, within=WITHIN)
    assert poller.digest_of(variant) != poller.digest_of(MODEL)
    await first_load(watching)
    await generate(watching.url, variant)
    await settled(watching)
    assert [row["name"] for row in await real_ollama.ps()] == [MODEL]
    await asyncio.sleep(1.0)  # a few /api/ps reads: none may turn into a load
    events = await loads(watching)
    assert [e["cause"] for e in events] == ["first_load"], str(events)
    [record] = await records(watching, 1, model=variant)
    assert record["load_event"] is None


@BOTH_RELEASES
async def test_a_reload_by_a_client_that_bypasses_the_proxy_is_seen_in_ps(
    watching: Proxy, real_ollama: Ollama
) -> None:
    await first_load(watching)
    await generate(real_ollama.url, MODEL, num_ctx=1024)  # straight to Ollama
    for _ in range(int(WITHIN / 0.1)):
        events = await loads(watching, MODEL)
        if len(events) == 2:
            break
        await asyncio.sleep(0.1)
    newest = events[0]
    assert (newest["source"], newest["context_length"]) == ("ps", 1024), events
    assert newest["cause"] == "unknown" and newest["request"] is None, newest

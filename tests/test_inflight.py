"""Who is waiting: an upstream with one slot, 4 streams from 2 clients. The waiting gauge, the
positions, the oldest wait, /_tap/api/inflight and its SSE form agree; busy time adds up."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import aiohttp
import orjson

from ollama_tap.auth import API_HEADERS
from ollama_tap.exchange import RequestFields
from ollama_tap.inflight.registry import InFlight
from tests.conftest import Proxy
from tests.support.exchanges import new_exchange
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, upstream_polled
from tests.support.records import AUTH

HEADER = "X-Ollama-Tap-Client"
ORDER = ("alpha", "beta", "alpha", "beta")
"""Clients of the four streams, in the order they are sent (50 ms apart)."""


def waiting(proxy: Proxy) -> float:
    return proxy.sample("ollama_tap_requests_waiting", {"model": LLAMA}) or 0.0


async def stream(session: aiohttp.ClientSession, url: str, client: str) -> tuple[float, float]:
    """One stream to its end: (start, end) on the test's clock."""
    started = time.monotonic()
    body = {"model": "llama3.2", "prompt": "hi"}
    async with session.post(f"{url}/api/generate", json=body, headers={HEADER: client}) as r:
        assert r.status == 200
        await r.read()
    return started, time.monotonic()


async def poll(proxy: Proxy, session: aiohttp.ClientSession, out: list[dict[str, Any]]) -> None:
    """Snapshots of the API, each with the gauges read right before and after it."""
    while True:
        before = waiting(proxy)
        async with session.get(f"{proxy.url}/_tap/api/inflight") as r:
            snapshot = await r.json()
        after = waiting(proxy)
        oldest = proxy.sample("ollama_tap_oldest_wait_seconds", {"model": LLAMA})
        out.append({"gauges": (before, after), "oldest": oldest, **snapshot})
        await asyncio.sleep(0.03)


async def watch(proxy: Proxy, session: aiohttp.ClientSession, out: list[tuple[float, Any]]) -> None:
    async with session.get(f"{proxy.url}/_tap/api/inflight", params={"watch": "1"}) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        # The security headers the other /_tap/ replies carry (added by the middleware
        # after the handler: too late for a stream prepared inside it).
        for name, value in API_HEADERS.items():
            assert r.headers[name] == value, name
        async for line in r.content:
            if line.startswith(b"data: "):
                out.append((time.monotonic(), orjson.loads(line[6:])))


def runs(values: list[Any]) -> list[Any]:
    """Values with consecutive repeats collapsed."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total


async def test_one_slot_four_streams_two_clients(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    fake_ollama.slots.limit = 1
    fake_ollama.script = Script(prefill_delay=0.5, token_delay=0.1, tokens=["a", "b", "c", "d"])
    await upstream_polled(proxy)
    polls: list[dict[str, Any]] = []
    events: list[tuple[float, Any]] = []
    async with aiohttp.ClientSession(headers=AUTH) as session:
        watcher = asyncio.create_task(watch(proxy, session, events))
        poller = asyncio.create_task(poll(proxy, session, polls))
        streams = []
        for client in ORDER:
            streams.append(asyncio.create_task(stream(session, proxy.url, client)))
            await asyncio.sleep(0.05)
        spans = await asyncio.gather(*streams)
        await asyncio.sleep(0.6)  # the last pushes
        watcher.cancel()
        poller.cancel()

    stable = [p for p in polls if p["gauges"][0] == p["gauges"][1]]
    for p in stable:  # the API and the gauge count the same exchanges
        assert p["waiting"].get(LLAMA, 0) == p["gauges"][0], p
    assert runs([p["gauges"][0] for p in stable])[-5:] == [4, 3, 2, 1, 0]

    # One streaming (the first sent), three waiting: positions 1-3 in the order sent.
    three = [p for p in stable if p["gauges"][0] == 3 and p["in_flight"] == 4]
    assert three
    for p in three:
        rows = p["exchanges"]  # oldest first
        assert [r["client"] for r in rows] == list(ORDER)
        assert [(r["phase"], r["position"]) for r in rows] == [
            ("streaming", None),
            ("waiting", 1),
            ("waiting", 2),
            ("waiting", 3),
        ]
        assert abs(rows[1]["elapsed"] - p["oldest"]) < 0.2, "the oldest waiting is first in line"

    # The oldest wait grows while the same exchange is oldest.
    oldest = [p["oldest"] for p in three]
    assert len(oldest) >= 3 and oldest == sorted(oldest) and oldest[-1] > oldest[0]

    # The SSE form shows the same sequence, at most 4 pushes a second.
    counts = runs([e[1]["waiting"].get(LLAMA, 0) for e in events])
    assert counts[-5:] == [4, 3, 2, 1, 0], counts
    assert events[-1][1]["in_flight"] == 0
    # When each push was made (its `at`): a busy loop may hand two of them over in one read.
    gaps = [b[1]["at"] - a[1]["at"] for a, b in itertools.pairwise(events)]
    assert min(gaps) >= 0.24, gaps
    sse_three = [e[1] for e in events if e[1]["waiting"].get(LLAMA) == 3 and e[1]["in_flight"] == 4]
    assert sse_three and [r["position"] for r in sse_three[0]["exchanges"]] == [None, 1, 2, 3]

    # Busy time: for each client, the wall time with at least one of its streams in flight.
    for client in ("alpha", "beta"):
        mine = [span for span, c in zip(spans, ORDER, strict=True) if c == client]
        busy = proxy.sample(
            "ollama_tap_client_busy_seconds_total", {"client": client, "model": LLAMA}
        )
        assert busy is not None and abs(busy - union(mine)) < 0.15, (client, busy, union(mine))
    assert waiting(proxy) == 0
    assert proxy.sample("ollama_tap_oldest_wait_seconds", {"model": LLAMA}) == 0


def test_the_view_shows_the_names_the_labels_fold() -> None:
    # Past the client cap and before Ollama vouched for the model, both labels are `other`;
    # the view still says who waits for what.
    registry = InFlight(model_label=lambda name: "other")
    ex = new_exchange("/api/chat", request=RequestFields(model="mistral-small", parsed=True))
    ex.client_name, ex.client_label = "w2", "other"
    registry.request(ex)
    snapshot = registry.snapshot()
    [row] = snapshot["exchanges"]
    assert (row["client"], row["model"], row["position"]) == ("w2", "mistral-small:latest", 1)
    assert snapshot["waiting"] == {"mistral-small:latest": 1}
    assert registry.busy_seconds().keys() == {("other", "other")}, "the series stay bounded"

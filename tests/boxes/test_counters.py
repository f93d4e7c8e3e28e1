"""The request counters per box: with several boxes each exchange is counted under its box's
`upstream` (the histograms under none); with one box no family has the label."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.samples import Sample

from ollama_tap.exchange import Exchange
from ollama_tap.metrics.observer import MetricsObserver
from ollama_tap.names import ModelLabels
from tests.boxes.conftest import MODELS, NAMES, Rig
from tests.conftest import Proxy
from tests.support.metrics import settled, upstream_polled
from tests.support.samples import sample_value
from tests.support.waiting import eventually

SENT = {"gpu1": 1, "gpu2": 2, "gpu3": 3}
"""Chats sent to each box: unequal, so a count under the wrong box cannot add up."""
COUNTERS = (
    "ollama_tap_requests_total",
    "ollama_tap_prompt_tokens_total",
    "ollama_tap_generation_tokens_total",
    "ollama_tap_decode_tokens_total",
)


async def scrape(proxy: Proxy) -> tuple[str, list[Sample]]:
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    found = [s for f in parse_text(text) for s in f.samples if s.name.startswith("ollama_tap_")]
    return text, found


def by_box(found: list[Sample], name: str, **labels: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for s in found:
        if s.name == name and labels.items() <= s.labels.items():
            out[s.labels["upstream"]] += s.value
    return dict(out)


async def test_each_box_counts_what_it_served(rig: Rig) -> None:
    served: dict[str, dict[str, float]] = {n: defaultdict(float) for n in NAMES}
    body = {"model": MODELS[2], "messages": [{"role": "user", "content": "hi"}], "stream": False}
    async with aiohttp.ClientSession() as s:
        for name, times in SENT.items():
            for _ in range(times):
                headers = {"X-Ollama-Tap-Upstream": name}
                async with s.post(rig.proxy.url + "/api/chat", json=body, headers=headers) as r:
                    reply = await r.json()
                    assert r.status == 200, reply
                served[name]["prompt"] += reply["prompt_eval_count"]
                served[name]["generation"] += reply["eval_count"]
        async with s.get(rig.proxy.url + "/api/tags") as r:  # every box's: served by none
            assert r.status == 200
        async with s.post(rig.proxy.url + "/api/pull", json={"model": MODELS[0]}) as r:
            assert r.status == 400  # no box named: refused before any box
    await settled(rig.proxy)
    text, found = await scrape(rig.proxy)

    chats = {
        n: float(sum(r.path_qs == "/api/chat" for r in f.received)) for n, f in rig.fakes.items()
    }
    assert chats == {n: float(t) for n, t in SENT.items()}
    assert by_box(found, "ollama_tap_requests_total", endpoint="/api/chat", status="200") == chats
    prompt = by_box(found, "ollama_tap_prompt_tokens_total", endpoint="/api/chat")
    generated = by_box(found, "ollama_tap_generation_tokens_total", endpoint="/api/chat")
    assert prompt == {n: served[n]["prompt"] for n in NAMES}
    assert generated == {n: served[n]["generation"] for n in NAMES}
    decoded = by_box(found, "ollama_tap_decode_tokens_total", model=MODELS[2])
    assert decoded == generated
    assert by_box(found, "ollama_tap_requests_in_flight") == {n: 0.0 for n in NAMES} | {"": 0.0}
    # Served by no box: counted under `upstream=""` (which Prometheus stores as no label).
    assert by_box(found, "ollama_tap_requests_total", endpoint="/api/tags") == {"": 1.0}
    assert by_box(found, "ollama_tap_requests_total", endpoint="/api/pull", status="400") == {
        "": 1.0
    }
    # Each name once, however many boxes feed it; the histograms are not split by box.
    for name in (*COUNTERS, "ollama_tap_request_duration_seconds"):
        assert text.count(f"# TYPE {name} ") == 1, name
        assert text.count(f"# HELP {name} ") == 1, name
    durations = [s for s in found if s.name == "ollama_tap_request_duration_seconds_count"]
    assert durations and not any("upstream" in s.labels for s in durations)
    chat_count = sum(s.value for s in durations if s.labels["endpoint"] == "/api/chat")
    assert chat_count == sum(SENT.values())


async def test_one_box_has_no_upstream_label(proxy: Proxy) -> None:
    await upstream_polled(proxy)
    body = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/chat", json=body) as r:
            assert r.status == 200
        async with s.get(proxy.url + "/api/tags") as r:
            assert r.status == 200
    await settled(proxy)
    text, found = await scrape(proxy)
    assert "upstream=" not in text
    assert {s.name for s in found} >= set(COUNTERS)
    chat = {"endpoint": "/api/chat", "status": "200"}
    chats = [s.value for s in found if s.name == COUNTERS[0] and chat.items() <= s.labels.items()]
    assert chats == [1.0]


def test_a_request_sent_on_to_the_next_box_moves_its_in_flight_count() -> None:
    boxes = {name: CollectorRegistry() for name in ("gpu1", "gpu2", "")}
    observer = MetricsObserver(CollectorRegistry(), ModelLabels(10), boxes=boxes)

    def in_flight(box: str) -> float:
        return sample_value(boxes[box], "ollama_tap_requests_in_flight") or 0.0

    ex = Exchange("POST", "/api/chat", "", "/api/chat", "127.0.0.1", {})
    ex.box = "gpu1"
    observer.request(ex)
    assert (in_flight("gpu1"), in_flight("gpu2")) == (1, 0)
    ex.box = "gpu2"  # gpu1 refused the connection: the router sent it to gpu2
    ex.status = 200
    observer.response_headers(ex)
    assert (in_flight("gpu1"), in_flight("gpu2")) == (0, 1)
    observer.response(ex)
    assert (in_flight("gpu1"), in_flight("gpu2")) == (0, 0)
    counted = {
        box: sample_value(registry, "ollama_tap_requests_total", {"status": "200"})
        for box, registry in boxes.items()
    }
    assert counted == {"gpu1": None, "gpu2": 1.0, "": None}


async def test_who_waits_is_counted_on_its_box(rig: Rig) -> None:
    """Two chats held in gpu2's prefill: `requests_waiting` and `oldest_wait_seconds` say
    so under `upstream="gpu2"`, and a box nobody waits on shows none; both series stay, at
    0, once the chats are answered."""
    rig.fakes["gpu2"].script.prefill_delay = 1.0
    body = {"model": MODELS[2], "messages": [{"role": "user", "content": "hi"}], "stream": False}
    headers = {"X-Ollama-Tap-Upstream": "gpu2"}

    async def chat(s: aiohttp.ClientSession) -> None:
        async with s.post(rig.proxy.url + "/api/chat", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()

    async with aiohttp.ClientSession() as s:
        chats = [asyncio.create_task(chat(s)) for _ in range(2)]
        model = {"model": MODELS[2]}
        await eventually(
            lambda: (
                rig.proxy.sample("ollama_tap_requests_waiting", {**model, "upstream": "gpu2"}) == 2
            )
        )
        _, found = await scrape(rig.proxy)
        assert by_box(found, "ollama_tap_requests_waiting", **model) == {"gpu2": 2.0}
        assert by_box(found, "ollama_tap_oldest_wait_seconds", **model)["gpu2"] > 0
        await asyncio.gather(*chats)
    await settled(rig.proxy)
    _, found = await scrape(rig.proxy)
    assert by_box(found, "ollama_tap_requests_waiting", **model) == {"gpu2": 0.0}
    assert by_box(found, "ollama_tap_oldest_wait_seconds", **model) == {"gpu2": 0.0}

"""Every answer per box: the loads, the records as the CLI shows them, the health check, the
spans' attributes, the metrics' `upstream` label."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from ollama_tap.app import BOXES
from ollama_tap.cli import main
from ollama_tap.exchange import Exchange
from ollama_tap.facts import Route, RouteTier
from ollama_tap.otel.spans import tap_attributes
from tests.boxes.conftest import MODELS, Rig
from tests.support.records import AUTH, records
from tests.support.waiting import eventually

ON_GPU1 = {"X-Ollama-Tap-Upstream": "gpu1"}


async def chat(s: aiohttp.ClientSession, url: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    async with s.post(url + "/api/chat", json=body, headers=ON_GPU1) as resp:
        assert resp.status == 200, await resp.text()


async def test_an_eviction_names_its_box(rig: Rig) -> None:
    tracker = rig.proxy.app[BOXES].by_name["gpu1"].loads
    async with aiohttp.ClientSession() as s:
        for step, model in enumerate((MODELS[0], MODELS[1], MODELS[0]), start=1):
            await chat(s, rig.proxy.url, model)
            await eventually(lambda n=step: len(tracker.events) >= n, within=10)
        async with s.get(rig.proxy.url + "/_tap/api/loads?box=gpu1", headers=AUTH) as resp:
            events: list[dict[str, Any]] = (await resp.json())["loads"]
        async with s.get(rig.proxy.url + "/_tap/api/loads?box=gpu2", headers=AUTH) as resp:
            assert (await resp.json())["loads"] == []
    assert [e["box"] for e in events] == ["gpu1"] * 3
    assert events[0]["cause"] == "evicted"
    assert events[0]["detail"] == f"evicted by {MODELS[1]} on gpu1"
    evicted = {"model": MODELS[0], "by": MODELS[1], "upstream": "gpu1"}
    assert rig.proxy.sample("ollama_tap_model_evictions_total", evicted) == 1
    named = rig.proxy.sample("ollama_tap_routed_total", {"upstream": "gpu1", "tier": "named"})
    assert named == 3


async def test_records_and_health_name_the_boxes(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    async with aiohttp.ClientSession() as s:
        await chat(s, rig.proxy.url, MODELS[0])
        # Its end (the record) first: the router learns there that the model replied on gpu1
        # (`Box.served`), which the client, having its reply, can outrun.
        await records(rig.proxy, 1)
        body = {"model": MODELS[1], "messages": [], "stream": False}
        async with s.post(rig.proxy.url + "/api/chat", json=body) as resp:
            assert resp.status == 200
        async with s.get(rig.proxy.url + "/_tap/healthz") as resp:
            health = await resp.json()
    assert health == {"upstream": "up", "boxes": {"gpu1": "up", "gpu2": "up", "gpu3": "up"}}
    found = await records(rig.proxy, 2)
    db = str(rig.proxy.settings.db_location)
    capsys.readouterr()  # the log lines so far
    assert await asyncio.to_thread(main, ["records", "list", "--db", db]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("id"))
    assert " box " in header
    assert await asyncio.to_thread(main, ["records", "list", "--db", db, "--box", "gpu1"]) == 0
    assert "1 record" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["records", "show", "--db", db, found[0]["id"]]) == 0
    shown = capsys.readouterr().out
    assert f"route: {found[0]['route']}" in shown and f"box: {found[0]['box']}" in shown
    assert "X-Ollama-Tap-Upstream named gpu1" in {r["route"] for r in found}


def test_spans_carry_the_box_and_the_reason() -> None:
    ex = Exchange("POST", "/api/chat", "", "/api/chat", "127.0.0.1", {})
    assert "ollama_tap.box" not in tap_attributes(ex, None)
    ex.box, ex.route = "gpu2", Route("gpu2", RouteTier.RESIDENT, "llama3.2:latest resident on gpu2")
    attrs = tap_attributes(ex, None)
    assert attrs["ollama_tap.box"] == "gpu2"
    assert attrs["ollama_tap.route"] == "llama3.2:latest resident on gpu2"

"""A scripted day on one box (OLLAMA_MAX_LOADED_MODELS=1): two apps, official clients, the
fake's scheduler. Every load's cause, trigger and client; the API, the CLI, the inspector's
Loads view, the records and the counters must all tell the same story."""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

import aiohttp
import httpx
import ollama
import pytest
from structlog.testing import capture_logs

from ollama_tap.app import LOADS
from ollama_tap.cli import main
from ollama_tap.exchange import Exchange
from tests.conftest import MakeProxy, Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.serve_process import ADMIN_TOKEN
from tests.support.waiting import eventually

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
LLAMA, QWEN = "llama3.2:latest", "qwen3:8b"
APP1, APP2 = "127.0.0.1", "127.0.0.2"
"""Two apps on one box: the client is the source address."""
EXPECTED = [
    (LLAMA, "first_load", APP1, ""),
    (LLAMA, "options_changed", APP2, "num_ctx 4096 → 8192"),
    (QWEN, "first_load", APP2, ""),
    (LLAMA, "evicted", APP1, f"evicted by {QWEN}"),
    (LLAMA, "expired", APP1, ""),
]
"""Oldest first; the keep_alive 0 unload's reload comes last (its detail names a request)."""


class Spy:
    """At each request hook (after the tracker's), the prediction counter and the fake's
    loads so far: a prediction must be counted before the load it predicts happened."""

    name = "spy"

    def __init__(self, proxy: list[Proxy], fake: FakeOllama) -> None:
        self.proxy, self.fake = proxy, fake
        self.seen: list[tuple[str, float, int]] = []

    def request(self, ex: Exchange) -> None:
        predicted = self.proxy[0].sample(
            "ollama_tap_reload_predicted_total", {"model": LLAMA, "field": "num_ctx"}
        )
        assert self.fake.scheduler is not None
        self.seen.append((ex.client, predicted or 0.0, len(self.fake.scheduler.loads)))


def app(proxy: Proxy, source: str) -> ollama.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return ollama.AsyncClient(host=proxy.url, transport=transport)


async def chat(client: ollama.AsyncClient, model: str, **kwargs: Any) -> None:
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    async for _ in await client.chat(model, messages=messages, stream=True, **kwargs):
        pass


def gauge(proxy: Proxy, name: str, model: str) -> float | None:
    return proxy.sample(f"ollama_tap_{name}", {"model": model})


async def loads(proxy: Proxy) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(f"{proxy.url}/_tap/api/loads") as resp:
            assert resp.status == 200
            events: list[dict[str, Any]] = (await resp.json())["loads"]
    return events[::-1]


async def day(proxy: Proxy, fake: FakeOllama) -> str:
    """The day's traffic; returns the id of the keep_alive 0 request."""
    app1, app2 = app(proxy, APP1), app(proxy, APP2)
    await chat(app1, "llama3.2", options={"num_ctx": 4096})
    await eventually(lambda: gauge(proxy, "model_context_length", LLAMA) == 4096)
    with capture_logs() as logs:
        await chat(app2, "llama3.2", options={"num_ctx": 8192})
    [warning] = [e for e in logs if e["event"] == "reload_predicted"]
    assert (warning["client"], warning["changes"]) == (APP2, ["num_ctx 4096 → 8192"])
    assert warning["log_level"] == "warning"
    await eventually(lambda: gauge(proxy, "model_context_length", LLAMA) == 8192)
    await chat(app2, "qwen3:8b")
    await eventually(lambda: gauge(proxy, "model_loaded", LLAMA) == 0, within=5)
    await eventually(lambda: gauge(proxy, "model_loaded", QWEN) == 1, within=5)
    await chat(app1, "llama3.2", options={"num_ctx": 8192})
    await eventually(lambda: gauge(proxy, "model_loaded", QWEN) == 0)
    await eventually(lambda: gauge(proxy, "model_loaded", LLAMA) == 1)
    # Warm, with a keep_alive that runs out: the next request finds it expired.
    await chat(app1, "llama3.2", options={"num_ctx": 8192}, keep_alive="1s")
    await eventually(lambda: gauge(proxy, "model_loaded", LLAMA) == 0, within=5)
    await chat(app1, "llama3.2", options={"num_ctx": 8192})
    await eventually(lambda: gauge(proxy, "model_loaded", LLAMA) == 1)
    # Warm again; this one unloads it when it ends.
    with capture_logs() as logs:
        await chat(app2, "llama3.2", options={"num_ctx": 8192}, keep_alive=0)
    unloader = next(e["id"] for e in logs if e.get("event") == "exchange")
    await eventually(lambda: gauge(proxy, "model_loaded", LLAMA) == 0)
    await chat(app1, "llama3.2", options={"num_ctx": 8192})
    return unloader


async def records_with_loads(proxy: Proxy, want: int) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession(headers=AUTH) as s:
        for _ in range(200):
            async with s.get(f"{proxy.url}/_tap/api/records?limit=1000") as resp:
                page: list[dict[str, Any]] = (await resp.json())["records"]
            with_load = [r for r in page if r["load_event"] is not None]
            if len(with_load) >= want:
                return with_load[::-1]
            await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(with_load)} records carry a load event")


def cli_table(proxy: Proxy) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["loads", "--url", proxy.url, "--token", ADMIN_TOKEN]) == 0
    return out.getvalue()


async def test_a_day_of_two_apps_on_one_box(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ollama.scheduler = Scheduler(fake_ollama, max_loaded=1)
    holder: list[Proxy] = []
    spy = Spy(holder, fake_ollama)
    proxy = await proxy_factory(observers=(spy,), poll_interval=0.1)
    holder.append(proxy)
    # The first poll (version, ps, tags and shows) before any traffic: a baseline.
    await eventually(lambda: proxy.sample("ollama_tap_model_info", {
        "model": QWEN, "family": "qwen3", "parameter_size": "8.2B", "quantization": "Q4_K_M"
    }) == 1)  # fmt: skip

    unloader = await day(proxy, fake_ollama)

    assert fake_ollama.scheduler.loads == [LLAMA, LLAMA, QWEN, LLAMA, LLAMA, LLAMA]
    expected = [
        *EXPECTED,
        (LLAMA, "unloaded", APP1, f"unloaded by request {unloader} from ollama-python ({APP2})"),
    ]
    # A load's context_length comes with the next /api/ps read after it (0.1 s here).
    await eventually(
        lambda: (
            len(proxy.app[LOADS].events) == 6
            and all(e.context_length is not None for e in proxy.app[LOADS].events)
        )
    )
    events = await loads(proxy)
    assert [(e["model"], e["cause"], e["client"], e["detail"]) for e in events] == expected
    _, changed, qwen, evicted, _, unloaded = events
    assert changed["changes"] == [{"field": "num_ctx", "from": 4096, "to": 8192}]
    assert changed["predicted"] and not any(e["predicted"] for e in events if e is not changed)
    assert (qwen["evicted"], evicted["evicted"], evicted["by"]) == ([LLAMA], [QWEN], QWEN)
    assert unloaded["by_request"] == unloader
    assert all(e["load_duration"] > 1.0 for e in events)
    assert [e["context_length"] for e in events] == [4096, 8192, 4096, 8192, 8192, 8192]

    # Predicted when the request arrived, while the runner still had its old options.
    [(client, predicted, loads_then)] = [s for s in spy.seen[1:2]]
    assert (client, predicted, loads_then) == (APP2, 1.0, 1)

    # The counters agree.
    causes = {"first_load": 0.0, "options_changed": 0.0, "evicted": 0.0, "expired": 0.0,
              "unloaded": 0.0}  # fmt: skip
    for e in events:
        if e["model"] == LLAMA:
            causes[e["cause"]] += 1
    for cause, count in causes.items():
        assert (
            proxy.sample("ollama_tap_model_loads_total", {"model": LLAMA, "cause": cause}) == count
        )
    assert proxy.sample("ollama_tap_model_loads_total", {"model": QWEN, "cause": "first_load"}) == 1
    assert proxy.sample("ollama_tap_model_loads_total", {"model": QWEN, "cause": "evicted"}) == 0
    for model, by in ((LLAMA, QWEN), (QWEN, LLAMA)):
        assert proxy.sample("ollama_tap_model_evictions_total", {"model": model, "by": by}) == 1
    assert (
        proxy.sample("ollama_tap_reload_predicted_total", {"model": LLAMA, "field": "num_ctx"}) == 1
    )

    # Each triggering record carries its load event.
    recs = await records_with_loads(proxy, 6)
    assert [(r["load_event"]["cause"], r["load_event"]["role"]) for r in recs] == [
        (c, "trigger") for _, c, _, _ in expected
    ]
    assert [r["id"] for r in recs] == [e["request"] for e in events]

    # `ollama-tap loads` prints the same table (wide enough not to wrap a cell).
    monkeypatch.setenv("COLUMNS", "300")
    table = await asyncio.to_thread(cli_table, proxy)
    lines = [line.split() for line in table.splitlines()[1:] if line.strip()]
    assert [(cells[2], cells[3]) for cells in lines[::-1]] == [(m, c) for m, c, _, _ in expected]
    assert all(e["request"] in table for e in events)

    # The inspector's Loads view: one timeline row per model, a mark per load coloured by
    # cause, and each mark a link to the triggering record.
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/loads")
    await page.evaluate("location.hash = '#/loads'")
    await page.wait_for("document.querySelector('#loads-view')?.dataset.loaded === '6'")
    marks = await page.evaluate(
        "[...document.querySelectorAll('svg.loads-timeline .load-mark')].map(m => [m.dataset.id,"
        " m.classList[1], m.getAttribute('fill'), m.parentNode.getAttribute('href')])"
    )
    by_id = {e["id"]: e for e in events}
    assert sorted(m[0] for m in marks) == sorted(by_id)
    for mark_id, cls, _, href in marks:
        assert cls == f"cause-{by_id[mark_id]['cause']}"
        assert href == f"#/records/{by_id[mark_id]['request']}"
    colours = {m[1]: m[2] for m in marks}
    assert len(set(colours.values())) == len(colours), "one colour per cause"
    rows = await page.evaluate(
        "[...document.querySelectorAll('#loads-table tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [(r[1], r[2], r[4]) for r in rows[::-1]] == [(m, c, a) for m, c, a, _ in expected]
    assert (
        await page.evaluate(
            "document.querySelectorAll('svg.loads-timeline text.model-name').length"
        )
        == 2
    )
    await page.click(f"#loads-table tbody tr[data-id='{changed['id']}'] a")
    await page.wait_for(f"location.hash === '#/records/{changed['request']}'")
    await page.wait_for("!document.querySelector('#record-view').hidden")
    assert await page.evaluate("document.querySelector('#loads-view').hidden")
    assert await page.problems() == []

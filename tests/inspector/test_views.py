"""The inspector's list and record views in headless Chromium: what a person sees first
(test_screenshots.py takes the README's pictures of them)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.inspector import (
    ROWS,
    by_endpoint,
    open_list,
    open_record,
    recorded,
    summaries,
    text_of,
    traffic,
)  # fmt: skip

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
CELLS = f"[...document.querySelectorAll('{ROWS}')].map(r => [...r.cells].map(c => c.textContent))"


async def test_list_summary_sorting_and_state_in_the_url(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page
) -> None:
    await traffic(proxy, fake_ollama)
    records = await summaries(proxy, 7)
    await open_list(page, proxy, 7)
    summary = await page.evaluate(text_of("#summary"))
    assert "requests 7" in summary and "errors 1 (14%)" in summary
    assert "TTFT p50" in summary and "p95" in summary
    assert "llama3.2:latest" in summary and "qwen3:8b" in summary and "tok/s" in summary
    rows = await page.evaluate(CELLS)
    assert [row[6] == "cold" for row in rows].count(True) == 1  # the marks column

    await page.click("th[data-sort=ttft]")
    assert "sort=-ttft" in await page.evaluate("location.hash")
    ids = await page.evaluate(f"[...document.querySelectorAll('{ROWS}')].map(r => r.dataset.id)")
    slowest = sorted(records, key=lambda r: -(r["ttft"] if r["ttft"] is not None else -1))
    assert ids == [r["id"] for r in slowest]

    await page.evaluate(
        "const o = document.querySelector('#filters [name=outcome]');"
        " o.value = 'ok'; o.dispatchEvent(new Event('change'))"
    )
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 6")
    state = await page.evaluate("location.hash")
    assert "outcome=ok" in state and "sort=-ttft" in state
    # A reload (or a bookmark) brings the same list back: filters, sort and all.
    mark = len(page.events)
    await page.send("Page.reload")
    await page.wait_event("Page.loadEventFired", mark)
    assert await page.evaluate("location.hash") == state
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 6")
    assert await page.evaluate("document.querySelector('#filters [name=outcome]').value") == "ok"
    assert await page.evaluate("document.querySelector('th[aria-sort]').dataset.sort") == "ttft"
    # From a record, the back link returns to it.
    await page.click(f"{ROWS} a")
    await page.wait_for("!document.querySelector('#record-view').hidden")
    assert await page.evaluate("document.querySelector('.back').getAttribute('href')") == state
    assert await page.problems() == []


async def test_live_refresh_shows_new_records(proxy: Proxy, page: Page) -> None:
    body = {"model": "llama3.2", "prompt": "hi", "stream": False}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{proxy.url}/api/generate", json=body) as resp:
            assert resp.status == 200
        await summaries(proxy, 1)
        await open_list(page, proxy, 1, "#/?live=1")
        assert await page.evaluate("document.querySelector('#live').checked")
        async with s.post(f"{proxy.url}/api/generate", json=body) as resp:
            assert resp.status == 200
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 2", seconds=12)
    assert await page.problems() == []


async def test_a_record_opens_on_its_headline_and_waterfall(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page
) -> None:
    await traffic(proxy, fake_ollama)
    records = await recorded(proxy, 7)
    await open_list(page, proxy, 7)
    cold = by_endpoint(records, "/api/generate")
    await open_record(page, cold)
    headline = await page.evaluate(text_of(".headline"))
    assert headline.startswith("ok") and "TTFT" in headline and "decode" in headline
    assert "cold start: load 1." in headline
    # Above the fold in a 1280×900 window: the headline and the whole waterfall.
    bottom = await page.evaluate(
        "document.querySelector('svg.waterfall').getBoundingClientRect().bottom"
    )
    assert bottom <= await page.evaluate("innerHeight")
    assert (
        await page.evaluate("document.querySelectorAll('svg.waterfall .thinking-span').length") == 1
    )
    assert (
        await page.evaluate("document.querySelectorAll('svg.waterfall .marker.ttfc').length") == 1
    )
    assert "first content" in await page.evaluate(text_of("#waterfall .legend"))

    openai = by_endpoint(records, "/v1/chat/completions")
    await open_record(page, openai)
    body = await page.evaluate("document.body.textContent")
    assert body.count("OpenAI-style routes carry no phase timings") == 1
    timings = await page.evaluate(
        "[...document.querySelectorAll('.timings td.num')].map(c => c.textContent)"
    )
    assert timings and "–" not in timings
    embed = by_endpoint(records, "/api/embed")
    await open_record(page, embed)
    assert "Embeddings have no stream" in await page.evaluate(text_of(".route-note"))
    assert await page.problems() == []


async def test_800_px_wide_and_dark(proxy: Proxy, fake_ollama: FakeOllama, page: Page) -> None:
    await traffic(proxy, fake_ollama)
    records = await recorded(proxy, 7)
    await page.send(
        "Emulation.setDeviceMetricsOverride",
        width=800,
        height=700,
        deviceScaleFactor=1,
        mobile=False,
    )
    await open_list(page, proxy, 7)
    wide = "document.documentElement.scrollWidth"
    assert await page.evaluate(wide) <= 800
    rows = await page.evaluate(CELLS)
    assert all(row[7] and row[8] for row in rows)  # TTFT and duration still shown
    await open_record(page, by_endpoint(records, "/api/generate"))
    assert await page.evaluate(wide) <= 800

    background = "getComputedStyle(document.body).backgroundColor"
    light = await page.evaluate(background)
    await page.send(
        "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "dark"}]
    )
    assert await page.evaluate(background) == "rgb(13, 17, 23)" != light
    assert await page.problems() == []

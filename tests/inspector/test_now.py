"""The Now view in headless Chromium: a waiting and a streaming exchange, updating live."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import upstream_polled
from tests.support.serve_process import ADMIN_TOKEN

ROWS = "#now-table tbody tr"


def cells(row: int) -> str:
    return f"[...document.querySelectorAll('{ROWS}')][{row}]?.querySelectorAll('td') ?? []"


async def generate(session: aiohttp.ClientSession, url: str, client: str) -> None:
    body = {"model": "llama3.2", "prompt": "hi"}
    headers = {"X-Ollama-Tap-Client": client}
    async with session.post(f"{url}/api/generate", json=body, headers=headers) as r:
        await r.read()


async def test_now_view_shows_waiting_and_streaming_live(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page
) -> None:
    fake_ollama.slots.limit = 1
    fake_ollama.script = Script(tokens=[f"t{i} " for i in range(40)], token_delay=0.1)
    await upstream_polled(proxy)  # the model is listed: its label from the first request on
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    await page.wait_for("document.querySelector('#records') !== null")
    await page.evaluate("location.hash = '#/now'")
    await page.wait_for("!document.querySelector('#now-view').hidden")
    assert await page.evaluate("document.querySelector('#list-view').hidden")
    await page.wait_for("document.querySelector('#now-summary').textContent.includes('0 in')")

    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(generate(session, proxy.url, "first"))]
        await asyncio.sleep(0.3)
        streams.append(asyncio.create_task(generate(session, proxy.url, "second")))
        phases = (
            f"[...document.querySelectorAll('{ROWS}')].map((r) => "
            "[...r.querySelectorAll('td')].slice(0, 5).map((c) => c.textContent).join('|'))"
        )
        await page.wait_for(f"{phases}.length === 2")
        rows = await page.evaluate(phases)
        assert rows == [
            "first|llama3.2:latest|/api/generate|streaming|",
            "second|llama3.2:latest|/api/generate|waiting|1",
        ]
        assert "1 waiting for llama3.2:latest" in await page.evaluate(
            "document.querySelector('#now-summary').textContent"
        )
        # Live, no reload: the streaming row's output count grows.
        outputs = f"Number(({cells(0)})[6]?.textContent)"
        first = await page.evaluate(outputs)
        await page.wait_for(f"{outputs} > {first} + 3")
        await asyncio.gather(*streams)
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 0")
    assert not await page.evaluate("document.querySelector('#now-empty').hidden")
    assert await page.problems() == []

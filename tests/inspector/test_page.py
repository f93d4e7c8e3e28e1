"""The inspector page in real headless Chromium, after real traffic through the proxy."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import ollama

from tests.conftest import MakeProxy, Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.inspector import ROWS, recorded, summaries, text_of
from tests.support.serve_process import ADMIN_TOKEN

PROMPT = "Why is the sky blue?"
HOSTILE_PROMPT = "<img src=x onerror=alert(1)>"
HOSTILE_TOKENS = ["<b>", "bold", "</b>", "<script>alert(2)</script>"]


async def traffic(proxy: Proxy, fake: FakeOllama) -> None:
    """A streamed generate with thinking, then a chat whose prompt and output are HTML."""
    client = ollama.AsyncClient(host=proxy.url)
    fake.script.thinking = ["Light", " scatters"]
    fake.script.token_delay = 0.01
    async for _ in await client.generate("llama3.2", PROMPT, stream=True):
        pass
    fake.script.thinking = []
    fake.script.tokens = HOSTILE_TOKENS
    fake.script.tool_calls = [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
    messages = [{"role": "user", "content": HOSTILE_PROMPT}]
    async for _ in await client.chat("llama3.2", messages=messages, stream=True):
        pass


async def open_record(page: Page, record: dict[str, Any]) -> None:
    await page.click(f'{ROWS}[data-id="{record["id"]}"] a')
    await page.wait_for(f"location.hash === '#/records/{record['id']}'")
    await page.wait_for("document.querySelector('#record h2') !== null")


async def test_inspector_in_chromium(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page, tmp_path: Path
) -> None:
    await traffic(proxy, fake_ollama)
    chat, generate = await recorded(proxy, 2)

    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    # The token was swapped for an HttpOnly cookie and left the address bar and history.
    assert await page.evaluate("location.href") == f"{proxy.url}/_tap/"
    assert await page.evaluate("document.cookie") == ""
    [cookie] = (await page.send("Network.getCookies", urls=[f"{proxy.url}/_tap/"]))["cookies"]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/_tap/")
    history = await page.send("Page.getNavigationHistory")
    assert not [e for e in history["entries"] if "token=" in e["url"]]

    # The list: newest first, one row per record.
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 2")
    rows = await page.evaluate(
        f"[...document.querySelectorAll('{ROWS}')].map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [row[2:6] for row in rows] == [
        ["llama3.2:latest", "/api/chat", "200", "ok"],
        ["llama3.2:latest", "/api/generate", "200", "ok"],
    ]

    # One record: timeline marks, one per output piece, and the output as text.
    await open_record(page, generate)
    pieces = len(generate["timeline"]["offsets"])
    assert pieces == 2 + 5
    await page.wait_for("document.querySelector('svg.timeline') !== null")
    assert await page.evaluate("document.querySelectorAll('svg.timeline .mark').length") == pieces
    kinds = await page.evaluate(
        "[...document.querySelectorAll('svg.timeline .mark')].map(m => m.classList[1])"
    )
    assert kinds == ["kind-thinking"] * 2 + ["kind-content"] * 5
    assert await page.evaluate(text_of("[data-field=output]")) == "The sky is blue."
    assert await page.evaluate(text_of("[data-field=thinking]")) == "Light scatters"
    assert PROMPT in await page.evaluate(text_of("[data-field=request]"))
    assert await page.evaluate("document.querySelectorAll('svg.waterfall rect.phase').length") == 6
    assert "unavailable: " in await page.evaluate(text_of("#context"))
    await page.screenshot(tmp_path / "record.png")

    # Recorded HTML is shown as text: nothing of it becomes an element.
    await page.evaluate("location.hash = ''")
    await page.wait_for("!document.querySelector('#list-view').hidden")
    await open_record(page, chat)
    await page.wait_for("document.querySelector('[data-field=output]') !== null")
    assert HOSTILE_PROMPT in await page.evaluate(text_of("[data-field=request]"))
    assert await page.evaluate(text_of("[data-field=output]")) == "".join(HOSTILE_TOKENS)
    assert "get_weather" in await page.evaluate(text_of("[data-field=tool_calls]"))
    assert await page.evaluate("document.querySelectorAll('img, b, main script').length") == 0
    assert await page.problems() == []

    # Without the cookie, the page says how to get in again.
    await page.send("Network.clearBrowserCookies")
    await page.evaluate("location.hash = ''")
    await page.click("#refresh")
    problem = await page.wait_for(
        f"!document.querySelector('#problem').hidden && {text_of('#problem')}"
    )
    assert "ollama-tap serve" in problem and "/_tap/?token=" in problem
    assert [p for p in await page.problems() if "401" not in p] == []


async def test_metadata_mode_shows_what_was_not_kept(proxy_factory: MakeProxy, page: Page) -> None:
    proxy = await proxy_factory(record="metadata")
    async for _ in await ollama.AsyncClient(host=proxy.url).generate(
        "llama3.2", PROMPT, stream=True
    ):
        pass
    [record] = await recorded(proxy, 1)
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/records/{record['id']}")
    notice = await page.wait_for(text_of(".metadata-mode"))
    assert "not kept" in notice
    marks = "document.querySelectorAll('svg.timeline .mark').length"
    assert await page.evaluate(marks) == len(record["timeline"]["offsets"]) == 5
    assert await page.evaluate("document.querySelector('[data-field=request]')") is None
    assert "not kept (metadata mode)" in await page.evaluate(text_of("#output"))
    assert "unavailable: the metadata privacy mode" in await page.evaluate(text_of("#context"))
    assert PROMPT not in await page.evaluate("document.body.textContent")
    assert await page.problems() == []


async def test_the_harness_sees_csp_violations(proxy: Proxy, page: Page) -> None:
    """The checks above are only worth something if a violation would be caught."""
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    await page.evaluate(
        "document.head.append(Object.assign(document.createElement('style'),"
        " {textContent: 'body { color: red }'}))"
    )
    await page.wait_for("window.__cspViolations.length > 0")
    assert any("style-src" in p for p in await page.problems())


async def test_load_more_and_filters(proxy: Proxy, page: Page) -> None:
    body = {"model": "llama3.2", "prompt": "hi", "stream": False}
    async with aiohttp.ClientSession() as s:

        async def generate() -> None:
            async with s.post(f"{proxy.url}/api/generate", json=body) as resp:
                assert resp.status == 200

        await asyncio.gather(*(generate() for _ in range(51)))
        async with s.post(f"{proxy.url}/api/chat", json={**body, "messages": []}) as resp:
            assert resp.status == 200
    await summaries(proxy, 52)
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    count = f"document.querySelectorAll('{ROWS}').length"
    await page.wait_for(f"{count} === 50 && !document.querySelector('#more').hidden")
    await page.click("#more")
    await page.wait_for(f"{count} === 52 && document.querySelector('#more').hidden")

    await page.evaluate("document.querySelector('#filters [name=endpoint]').value = '/api/chat'")
    await page.click("#filters button[type=submit]")
    await page.wait_for(f"{count} === 1")
    await page.evaluate("document.querySelector('#filters [name=endpoint]').value = ''")
    await page.evaluate(
        "const o = document.querySelector('#filters [name=outcome]');"
        " o.value = 'stream_error'; o.dispatchEvent(new Event('change'))"
    )
    await page.wait_for(f"{count} === 0 && !document.querySelector('#empty').hidden")
    assert await page.problems() == []

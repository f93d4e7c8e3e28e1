"""What the inspector's page tests share: a mix of traffic, the records as the API lists them,
opening the list and a record in the browser, and selectors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import ollama
import pytest

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.serve_process import ADMIN_TOKEN

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ROWS = "#records tbody tr"


async def summaries(proxy: Proxy, want: int) -> list[dict[str, Any]]:
    """The listed records once `want` have been written, newest first."""
    async with aiohttp.ClientSession(headers=AUTH) as s:
        for _ in range(100):
            async with s.get(f"{proxy.url}/_tap/api/records?limit=1000") as resp:
                page: list[dict[str, Any]] = (await resp.json())["records"]
            if len(page) >= want:
                return page
            await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(page)} of {want} records were written")


async def recorded(proxy: Proxy, want: int) -> list[dict[str, Any]]:
    """Every record in full once `want` have been written, newest first."""
    listed = await summaries(proxy, want)
    async with aiohttp.ClientSession(headers=AUTH) as s:
        full = []
        for summary in listed:
            async with s.get(f"{proxy.url}/_tap/api/records/{summary['id']}") as resp:
                full.append(await resp.json())
        return full


def text_of(selector: str) -> str:
    return f"document.querySelector({json.dumps(selector)})?.textContent"


async def traffic(proxy: Proxy, fake: FakeOllama) -> None:
    """A cold, thinking generate; chats on two models; OpenAI chat; an embed; a failure."""
    client = ollama.AsyncClient(host=proxy.url)
    fake.script.thinking = ["Light", " scatters", " off", " air"]
    fake.script.token_delay = 0.01
    fake.script.load_delay = 1.05
    async for _ in await client.generate("qwen3:8b", "Why is the sky blue?", stream=True):
        pass
    fake.script.thinking, fake.script.load_delay = [], 0.0
    for model, delay in (("llama3.2", 0.0), ("qwen3:8b", 0.03), ("llama3.2", 0.01)):
        fake.script.prefill_delay = delay
        messages = [{"role": "user", "content": "Say hi"}]
        async for _ in await client.chat(model, messages=messages, stream=True):
            pass
    fake.script.prefill_delay = 0.0
    async with aiohttp.ClientSession() as s:
        body = {"model": "llama3.2", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        async with s.post(f"{proxy.url}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()
        body = {"model": "all-minilm", "input": "the sky"}
        async with s.post(f"{proxy.url}/api/embed", json=body) as resp:
            assert resp.status == 200
    fake.script.status_error = (500, "model runner crashed")
    with pytest.raises(ollama.ResponseError):
        await client.chat("llama3.2", messages=[{"role": "user", "content": "y"}])
    fake.script.status_error = None


async def open_list(page: Page, proxy: Proxy, rows: int, hash_: str = "") -> None:
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}{hash_}")
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === {rows}")


async def open_record(page: Page, record: dict[str, Any]) -> None:
    await page.evaluate(f"location.hash = '#/records/{record['id']}'")
    await page.wait_for(
        f"document.querySelector('#record h2') && {text_of('#facts')}?.includes('{record['id']}')"
    )


async def window(page: Page, width: int, height: int) -> None:
    await page.send(
        "Emulation.setDeviceMetricsOverride",
        width=width, height=height, deviceScaleFactor=1, mobile=False,
    )  # fmt: skip


def by_endpoint(records: list[dict[str, Any]], endpoint: str) -> dict[str, Any]:
    return next(r for r in records if r["endpoint"] == endpoint)

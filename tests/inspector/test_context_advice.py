"""The context advice: GET /_tap/api/context after a truncated prompt, and the table under the
Loads view in headless Chromium."""

from __future__ import annotations

from typing import Any

import aiohttp
import ollama

from ollama_tap.advice.sizing import padded
from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.inspector import AUTH, recorded
from tests.support.serve_process import ADMIN_TOKEN

LLAMA32_KV_PER_TOKEN = 28 * 8 * (128 + 128) * 2
"""The fake llama3.2's /api/show: 28 layers, 8 KV heads, 3072 / 24 = 128 per head, f16."""


async def cut_and_fit(proxy: Proxy) -> dict[str, Any]:
    """One prompt of 5,100 tokens cut at num_ctx 4096 and two that fit, from code-helper;
    the cut one's record."""
    client = ollama.AsyncClient(host=proxy.url, headers={"X-Ollama-Tap-Client": "code-helper"})
    await client.generate("llama3.2", " ".join(["w"] * 5100), options={"num_ctx": 4096})
    for _ in range(2):
        await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 4096})
    records = await recorded(proxy, 3)
    [cut] = [r for r in records if r["truncation"]]
    return cut


async def context_api(proxy: Proxy, **params: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(headers=AUTH) as s,
        s.get(f"{proxy.url}/_tap/api/context", params=params) as resp,
    ):
        return resp.status, await resp.json()


async def test_the_api_advises_the_num_ctx_that_holds_the_cut_prompt(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.context_rules = True
    cut = await cut_and_fit(proxy)
    verdict = cut["truncation"]
    needed = cut["prompt_tokens"] + verdict["tokens_lost"] + cut["eval_tokens"]
    status, body = await context_api(proxy, since="1h")
    assert status == 200, body
    [advice] = body["advice"]
    assert (advice["model"], advice["client"], advice["requests"], advice["cut"]) == (
        "llama3.2:latest", "code-helper", 3, 1,
    )  # fmt: skip
    assert (advice["needed"], advice["needed_exact"], advice["num_ctx"]) == (
        needed, True, padded(needed),
    )  # fmt: skip
    assert advice["context"] == 4096
    assert advice["kv_bytes"] == LLAMA32_KV_PER_TOKEN * padded(needed)
    assert advice["kv_bytes_now"] == LLAMA32_KV_PER_TOKEN * 4096
    assert advice["advice"].startswith(f"set num_ctx to {padded(needed):,} (")
    assert body["problem"] is None


async def test_the_api_is_guarded_and_names_a_bad_window(proxy: Proxy) -> None:
    async with aiohttp.ClientSession() as s, s.get(f"{proxy.url}/_tap/api/context") as resp:
        assert resp.status == 401
    status, body = await context_api(proxy, since="yesterday-ish")
    assert status == 400
    assert body["error"].startswith("'yesterday-ish' is not a time; give a time ago (30m"), body


async def test_the_loads_view_shows_the_advice(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page
) -> None:
    fake_ollama.context_rules = True
    cut = await cut_and_fit(proxy)
    needed = cut["prompt_tokens"] + cut["truncation"]["tokens_lost"] + cut["eval_tokens"]
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/loads")
    await page.wait_for("document.querySelector('#advice')?.dataset.rows === '1'")
    cells = await page.evaluate(
        "[...document.querySelectorAll('#advice-table tbody td')].map(c => c.textContent)"
    )
    assert cells[:6] == ["llama3.2:latest", "code-helper", "3", "1 (33%)", "0", "4,096"], cells
    assert cells[6] == f"{padded(needed):,}"
    assert cells[8].startswith(f"set num_ctx to {padded(needed):,}")
    assert await page.evaluate("document.querySelector('#advice-table tbody tr').className") == (
        "stands-out"
    )
    assert await page.problems() == []

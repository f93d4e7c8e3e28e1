"""The truncation badge of a record in real headless Chromium, after a truncated prompt."""

from __future__ import annotations

import ollama

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.inspector import recorded
from tests.support.serve_process import ADMIN_TOKEN


async def test_a_truncated_prompt_shows_its_badge(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page
) -> None:
    fake_ollama.context_rules = True
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llama3.2", " ".join(["w"] * 5100), options={"num_ctx": 4096})
    await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 4096})
    plain, cut = await recorded(proxy, 2)
    assert cut["truncation"] is not None and plain["truncation"] is None
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/records/{cut['id']}")
    badge = await page.wait_for("document.querySelector('.truncation')?.textContent")
    assert badge.startswith("prompt truncated (T2): the first ≈3,050 tokens")
    assert "it was 5,100 tokens, the runtime context 4,096; raise num_ctx" in badge
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/records/{plain['id']}")
    await page.wait_for("document.querySelector('#record h2 .model')?.textContent")
    assert await page.evaluate("document.querySelector('.truncation')") is None
    assert await page.problems() == []

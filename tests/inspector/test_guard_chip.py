"""A record whose body the reload guard rewrote says so in its headline, in headless Chromium."""

from __future__ import annotations

import ollama

from tests.conftest import MakeProxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.inspector import recorded
from tests.support.serve_process import ADMIN_TOKEN

CHIPS = "[...document.querySelectorAll('#record .standout')].map((e) => e.textContent)"


async def test_the_headline_names_what_the_guard_sent(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, page: Page
) -> None:
    fake_ollama.scheduler = Scheduler(fake_ollama, max_loaded=1)
    proxy = await proxy_factory(reload_guard=True)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 8192})
    await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 4096})
    guarded, loaded = await recorded(proxy, 2)
    assert guarded["reload_guard"] is not None and loaded["reload_guard"] is None

    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/records/{guarded['id']}")
    await page.wait_for("document.querySelector('#record .standout')?.textContent")
    assert "reload guard sent num_ctx 8192, not 4096" in await page.evaluate(CHIPS)
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/records/{loaded['id']}")
    await page.wait_for("document.querySelector('#record h2 .model')?.textContent")
    assert not any("reload guard" in chip for chip in await page.evaluate(CHIPS))
    assert await page.problems() == []

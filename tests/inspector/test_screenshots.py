"""The README's four screenshots (list, record, Loads, Now), taken from real traffic in
headless Chromium at 1280×720. Written to docs/images/ with WRITE_SCREENSHOTS=1
(`WRITE_SCREENSHOTS=1 pytest tests/inspector/test_screenshots.py`), else to a temporary
directory; each is checked for its size, and the page for problems, either way."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from pathlib import Path

import aiohttp
import ollama

from tests.conftest import MakeProxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.inspector import AUTH, by_endpoint, open_list, open_record, recorded, traffic
from tests.support.serve_process import ADMIN_TOKEN

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
WIDTH, HEIGHT = 1280, 720
MAX_BYTES = 160_000
"""Small enough for a README; a view that outgrows it is showing too much at once."""


async def shot(page: Page, path: Path) -> bytes:
    """The viewport as a PNG (the fold, not the whole page): it is what a person sees."""
    data = base64.b64decode((await page.send("Page.captureScreenshot", format="png"))["data"])
    await asyncio.to_thread(path.write_bytes, data)
    return data


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def swaps(fake: FakeOllama, url: str) -> None:
    """Two apps taking turns on a box that holds one model: every turn is a load."""
    fake.script = Script(tokens=["The", " sky", " is", " blue."])
    for app, model in (
        ("code-helper", "llama3.2"),
        ("notes", "qwen3:8b"),
        ("code-helper", "llama3.2"),
    ):
        client = ollama.AsyncClient(host=url, headers={"X-Ollama-Tap-Client": app})
        await client.chat(model, messages=[{"role": "user", "content": "Why is the sky blue?"}])


async def too_long(fake: FakeOllama, url: str) -> None:
    """code-helper's prompt of 5,100 tokens at num_ctx 4096 (the context it has): the
    context advice under the loads says what would have held it."""
    fake.context_rules = True
    client = ollama.AsyncClient(host=url, headers={"X-Ollama-Tap-Client": "code-helper"})
    await client.generate("llama3.2", " ".join(["w"] * 5100), options={"num_ctx": 4096})
    fake.context_rules = False


async def loads_seen(url: str, want: int) -> None:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        for _ in range(200):
            async with session.get(f"{url}/_tap/api/loads") as resp:
                if len((await resp.json())["loads"]) >= want:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {want} loads seen")


async def generate(session: aiohttp.ClientSession, url: str, app: str, model: str) -> None:
    body = {"model": model, "prompt": "Tell me a story"}
    async with session.post(
        f"{url}/api/generate", json=body, headers={"X-Ollama-Tap-Client": app}
    ) as resp:
        await resp.read()


async def test_screenshots(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, page: Page, tmp_path: Path
) -> None:
    proxy = await proxy_factory(poll_interval=0.1)
    target = IMAGES if os.environ.get("WRITE_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    await page.send(
        "Emulation.setDeviceMetricsOverride",
        width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False,
    )  # fmt: skip
    taken = []

    # A box that holds one model, two apps taking turns: each turn a load, the second and
    # third evicting the other model. Each load takes over a second, a cold start the reply
    # itself shows: the view names the app and the request behind it, whatever /api/ps
    # reads land while it runs.
    fake_ollama.scheduler = Scheduler(fake_ollama, max_loaded=1, load_seconds=1.1)
    await swaps(fake_ollama, proxy.url)
    await too_long(fake_ollama, proxy.url)
    await loads_seen(proxy.url, 3)  # the view reads them once, when it opens
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}#/loads")
    await page.wait_for("Number(document.querySelector('#loads-view')?.dataset.loaded) >= 3")
    taken.append(await shot(page, target / "inspector-loads.png"))
    fake_ollama.scheduler = None

    await traffic(proxy, fake_ollama)
    records = await recorded(proxy, 11)
    await page.evaluate("location.hash = '#/'")
    await open_list(page, proxy, 11)
    taken.append(await shot(page, target / "inspector-list.png"))
    await open_record(page, by_endpoint(records, "/api/generate"))
    await page.wait_for("document.querySelector('svg.waterfall')")
    taken.append(await shot(page, target / "inspector-record.png"))

    fake_ollama.slots.limit = 1
    fake_ollama.script = Script(tokens=[f"t{i} " for i in range(60)], token_delay=0.1)
    await page.evaluate("location.hash = '#/now'")
    await page.wait_for("!document.querySelector('#now-view').hidden")
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(generate(session, proxy.url, "code-helper", "llama3.2"))]
        await asyncio.sleep(0.3)
        streams.append(asyncio.create_task(generate(session, proxy.url, "notes", "llama3.2")))
        await page.wait_for("document.querySelectorAll('#now-table tbody tr').length === 2")
        await asyncio.sleep(1.0)  # a second of output in the streaming row
        taken.append(await shot(page, target / "inspector-now.png"))
        await asyncio.gather(*streams)

    for data in taken:
        assert png_size(data) == (WIDTH, HEIGHT)
        assert len(data) < MAX_BYTES, len(data)
    assert await page.problems() == []

"""The record list in headless Chromium: every column fits 1280 and 1800 px, the client is
the name the app gave, and each row carries its marks (truncated, cold, slow, error) with
slow and cold rows tinted."""

from __future__ import annotations

from typing import Any

import ollama
import pytest

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.models import new_model
from tests.support.inspector import ROWS, summaries
from tests.support.serve_process import ADMIN_TOKEN

ROW_FACTS = f"""[...document.querySelectorAll('{ROWS}')].map(r => ({{
  id: r.dataset.id,
  marks: (r.dataset.marks ?? '').split(' ').filter(Boolean),
  client: r.querySelector('td.client').textContent,
  tint: getComputedStyle(r).backgroundColor,
}}))"""
LONG_NAME = "nightly-summaries-of-every-support-ticket-for-the-docs-team"
LONG_MODEL = "hf.co/bartowski/Meta-Llama-3.1-8B-Instruct-abliterated-GGUF:Q4_K_M"
"""Names longer than their columns: cut with an ellipsis, whole in the tooltip."""
FITS = """(() => {
  const table = document.querySelector('#records');
  const last = table.querySelector('thead th:last-child');
  return {
    right: last.getBoundingClientRect().right,
    overflow: table.parentElement.scrollWidth - table.parentElement.clientWidth,
    page: document.documentElement.scrollWidth,
    decode: last.textContent,
  };
})()"""


async def mixed_traffic(proxy: Proxy, fake: FakeOllama) -> None:
    """Six decodes of one model by a named app, the last five times slower; a cold load; a
    truncated prompt; a failure, from an app with a long name."""
    named = ollama.AsyncClient(host=proxy.url, headers={"X-Ollama-Tap-Client": "code-helper"})
    plain = ollama.AsyncClient(host=proxy.url)
    for delay in (0.05,) * 5 + (0.25,):
        fake.script.token_delay = delay
        await named.generate("llama3.2", "Why is the sky blue?")
    fake.script.token_delay = 0.0
    fake.script.load_delay = 1.05
    await plain.generate("qwen3:8b", "Why is the sky blue?")
    fake.script.load_delay = 0.0
    fake.context_rules = True
    await plain.generate("llama3.2", " ".join(["w"] * 5100), options={"num_ctx": 4096})
    fake.context_rules = False
    fake.models[LONG_MODEL] = new_model(LONG_MODEL)
    fake.script.status_error = (500, "model runner crashed")
    batch = ollama.AsyncClient(host=proxy.url, headers={"X-Ollama-Tap-Client": LONG_NAME})
    with pytest.raises(ollama.ResponseError):
        await batch.chat(LONG_MODEL, messages=[{"role": "user", "content": "y"}])
    fake.script.status_error = None


def by_marks(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for mark in row["marks"] or ["none"]:
            found.setdefault(mark, []).append(row)
    return found


async def test_marks_client_and_tint(proxy: Proxy, fake_ollama: FakeOllama, page: Page) -> None:
    await mixed_traffic(proxy, fake_ollama)
    records = await summaries(proxy, 9)
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 9")
    rows = await page.evaluate(ROW_FACTS)
    marked = by_marks(rows)
    newest_first = [r["id"] for r in records]
    assert [r["id"] for r in marked["slow"]] == [newest_first[3]]  # the sixth decode
    assert [r["id"] for r in marked["cold"]] == [newest_first[2]]
    assert [r["id"] for r in marked["truncated"]] == [newest_first[1]]
    assert [r["id"] for r in marked["error"]] == [newest_first[0]]
    assert len(marked["none"]) == 5
    assert [r["client"] for r in rows[3:]] == ["code-helper"] * 6
    assert rows[2]["client"] == "ollama-python"  # named by its User-Agent
    assert rows[0]["client"] == LONG_NAME
    plain = marked["none"][0]["tint"]
    assert marked["slow"][0]["tint"] == marked["cold"][0]["tint"] != plain
    assert marked["error"][0]["tint"] not in (plain, marked["slow"][0]["tint"])
    assert await page.problems() == []


@pytest.mark.parametrize("width", [1280, 1800])
async def test_every_column_fits(
    proxy: Proxy, fake_ollama: FakeOllama, page: Page, width: int
) -> None:
    await mixed_traffic(proxy, fake_ollama)
    await summaries(proxy, 9)
    await page.send(
        "Emulation.setDeviceMetricsOverride",
        width=width, height=900, deviceScaleFactor=1, mobile=False,
    )  # fmt: skip
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    await page.wait_for(f"document.querySelectorAll('{ROWS}').length === 9")
    fits = await page.evaluate(FITS)
    assert fits["decode"] == "decode"
    assert fits["overflow"] <= 0 and fits["right"] <= width and fits["page"] <= width, fits
    shown = await page.evaluate(
        "[...document.querySelectorAll('#records thead th')]"
        ".filter(th => getComputedStyle(th).display !== 'none').map(th => th.textContent)"
    )
    assert shown == [
        "time", "client", "model", "endpoint", "status", "outcome", "marks", "TTFT",
        "duration", "load", "tokens", "decode",
    ]  # fmt: skip
    assert await page.problems() == []

"""The inspector over a PostgreSQL database two taps write to: both shown, one filtered."""

from __future__ import annotations

import asyncio

import ollama

from tests.conftest import MakeProxy
from tests.inspector.browser import Page
from tests.support.inspector import ROWS, summaries
from tests.support.postgres import pg_server, pg_url
from tests.support.serve_process import ADMIN_TOKEN

__all__ = ["pg_server", "pg_url"]  # fixtures


async def test_records_of_both_taps_and_the_instance_filter(
    proxy_factory: MakeProxy, pg_url: str, page: Page
) -> None:
    a = await proxy_factory(db=pg_url, instance="box-a")
    b = await proxy_factory(db=pg_url, instance="box-b")
    await asyncio.gather(
        *(ollama.AsyncClient(host=p.url).generate("llama3.2", "hi") for p in (a, a, b))
    )
    await summaries(a, 3)
    await page.navigate(f"{a.url}/_tap/?token={ADMIN_TOKEN}")
    count = f"document.querySelectorAll('{ROWS}').length"
    await page.wait_for(f"{count} === 3")
    await page.evaluate("document.querySelector('#filters [name=instance]').value = 'box-b'")
    await page.click("#filters button[type=submit]")
    await page.wait_for(f"{count} === 1")
    assert await page.problems() == []

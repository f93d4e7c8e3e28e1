"""What the inspector's page tests share: the records as the API lists them, and selectors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from tests.conftest import Proxy
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

"""The recorder's API as a test reads it: authorised, and waiting for the writer."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.conftest import Proxy
from tests.support.serve_process import ADMIN_TOKEN

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def records(proxy: Proxy, want: int, **query: str) -> list[dict[str, Any]]:
    """The records the API lists, waiting (bounded) until `want` have been written."""
    async with aiohttp.ClientSession(headers=AUTH) as s:
        for _ in range(100):
            async with s.get(f"{proxy.url}/_tap/api/records", params=query) as resp:
                assert resp.status == 200
                found: list[dict[str, Any]] = (await resp.json())["records"]
            if len(found) >= want:
                return found
            await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(found)} of {want} records were written")

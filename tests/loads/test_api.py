"""/_tap/api/loads behind the admin token, its bounds, and what a metadata-mode record keeps."""

from __future__ import annotations

import aiohttp
import ollama

from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.serve_process import ADMIN_TOKEN
from tests.support.waiting import eventually

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def test_the_loads_route_needs_the_token_and_checks_its_limit(
    proxy_factory: MakeProxy,
) -> None:
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{proxy.url}/_tap/api/loads") as resp:
            assert resp.status == 401
        async with s.get(f"{proxy.url}/_tap/api/loads?limit=0", headers=AUTH) as resp:
            assert resp.status == 400
            assert "limit must be a whole number from 1 to 500" in (await resp.json())["error"]
        async with s.get(f"{proxy.url}/_tap/api/loads", headers=AUTH) as resp:
            assert (resp.status, await resp.json()) == (200, {"loads": []})


async def test_a_metadata_record_carries_its_load_event_without_the_address(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.scheduler = Scheduler(fake_ollama, load_seconds=1.05)
    proxy = await proxy_factory(record="metadata")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "Why is the sky blue?")
    async with aiohttp.ClientSession(headers=AUTH) as s:

        async def recorded() -> bool:
            async with s.get(f"{proxy.url}/_tap/api/records") as resp:
                return len((await resp.json())["records"]) == 1

        await eventually(recorded)
        async with s.get(f"{proxy.url}/_tap/api/records") as resp:
            [record] = (await resp.json())["records"]
        async with s.get(f"{proxy.url}/_tap/api/loads?model=llama3.2") as resp:
            [event] = (await resp.json())["loads"]
    # metadata mode: the app's name stays, its address goes, in the API as in the record
    assert (event["client"], event["address"]) == ("ollama-python", None)
    # The record is the event as the reply's end knew it: /api/ps is read after it.
    expected = {**event, "role": "trigger", "context_length": None}
    assert record["load_event"] == expected
    assert record["load_event"]["cause"] == "first_load"
    assert record["client"] is None


async def test_full_mode_lists_the_client_address(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.scheduler = Scheduler(fake_ollama, load_seconds=1.05)
    proxy = await proxy_factory(record="full")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "Why is the sky blue?")
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(f"{proxy.url}/_tap/api/loads?model=llama3.2") as resp:
            [event] = (await resp.json())["loads"]
    assert (event["client"], event["address"]) == ("ollama-python", "127.0.0.1")

"""Records of requests Ollama never answered keep what the request said."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from ollama_tap.recorder.store import Filters, Store
from tests.conftest import MakeProxy
from tests.support.serve_process import free_port
from tests.support.waiting import eventually


async def _in_two_pieces() -> AsyncIterator[bytes]:
    """A body that is still arriving when the proxy finds Ollama down (a long chat history
    or an image spans several TCP segments the same way)."""
    yield b'{"model": "llama3.2", '
    await asyncio.sleep(0.2)
    yield b'"prompt": "hi"}'


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_request_made_while_ollama_is_down_keeps_its_model(
    proxy_factory: MakeProxy, streamed: bool
) -> None:
    proxy = await proxy_factory(upstream=f"http://127.0.0.1:{free_port()}")
    whole = b'{"model": "llama3.2", "prompt": "hi"}'
    body = _in_two_pieces() if streamed else whole
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/api/generate", data=body, headers=headers) as resp:
            assert resp.status == 502
    store = Store(proxy.settings.db_path)
    await eventually(lambda: bool(store.page(Filters())[0]))
    [record] = store.page(Filters())[0]
    assert (record["outcome"], record["model"]) == ("upstream_unreachable", "llama3.2:latest")

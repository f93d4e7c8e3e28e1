"""The `fake_ollama` fixture (a pytest plugin: tests/conftest.py loads it)."""

from __future__ import annotations

import pytest_asyncio
from pytest_aiohttp import AiohttpServer

from tests.support.fake_ollama.server import FakeOllama


@pytest_asyncio.fixture
async def fake_ollama(aiohttp_server: AiohttpServer) -> FakeOllama:
    """A FakeOllama on a random loopback port; `url` is its base URL without a trailing slash."""
    fake = FakeOllama()
    server = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("")).rstrip("/")
    return fake

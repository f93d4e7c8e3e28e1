"""Fixtures of the transport tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.support.relaying import RawHandler


@pytest.fixture
async def raw_upstream() -> AsyncIterator[Callable[[RawHandler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: RawHandler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()

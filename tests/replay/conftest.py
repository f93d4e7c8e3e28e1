"""Replay fixtures: a database recorded through the real proxy, and `replay serve` over it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pytest_aiohttp import AiohttpServer

from proxy.recorder.store import Filters, Store
from proxy.replay.matching import MatchMode
from proxy.replay.serving import REPLAYER, Pacing, Replayer, load, replay_app
from tests.conftest import Proxy
from tests.support.records import records


class Replay:
    """A running `replay serve`: its URL and the handler (for its miss count)."""

    def __init__(self, url: str, replayer: Replayer) -> None:
        self.url, self.replayer = url, replayer


StartReplay = Callable[..., Awaitable[Replay]]


@pytest.fixture
def replay_of(aiohttp_server: AiohttpServer) -> StartReplay:
    """Serve `proxy`'s database once `want` records are written."""

    async def start(
        proxy: Proxy,
        want: int,
        mode: MatchMode = MatchMode.BODY,
        loop: bool = False,
        **pacing: Any,
    ) -> Replay:
        await records(proxy, want)
        store = Store(proxy.settings.db_path)
        loaded = await asyncio.to_thread(load, store, Filters(), mode, loop)
        app = replay_app(store, loaded, Pacing(**pacing))
        server = await aiohttp_server(app)
        return Replay(str(server.make_url("")).rstrip("/"), app[REPLAYER])

    return start

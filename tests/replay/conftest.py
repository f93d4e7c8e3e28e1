"""Replay fixtures: a database recorded through the real proxy, and `replay serve` over it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from aiohttp import web

from ollama_tap.recorder.store import Filters, Store
from ollama_tap.replay.matching import MatchMode
from ollama_tap.replay.serving import REPLAYER, Pacing, Replayer, load, replay_app
from tests.conftest import Proxy
from tests.support.records import records


class Replay:
    """A running `replay serve`: its URL and the handler (for its miss count)."""

    def __init__(self, url: str, replayer: Replayer) -> None:
        self.url, self.replayer = url, replayer


StartReplay = Callable[..., Awaitable[Replay]]


@pytest_asyncio.fixture
async def replay_of() -> AsyncIterator[StartReplay]:
    """Serve `proxy`'s database once `want` records are written.

    Served by an AppRunner as `web.run_app` serves it: without handler cancellation, so a
    client that leaves shows up as a failed write, as in production.
    """
    runners: list[web.AppRunner] = []

    async def start(
        proxy: Proxy,
        want: int,
        mode: MatchMode = MatchMode.BODY,
        loop: bool = False,
        token: str | None = None,
        explain: bool = False,
        **pacing: Any,
    ) -> Replay:
        await records(proxy, want)
        store = Store(proxy.settings.db_path)
        loaded = await asyncio.to_thread(load, store, Filters(), mode, loop)
        app = replay_app(store, loaded, Pacing(**pacing), token=token, explain=explain)
        runner = web.AppRunner(app, handler_cancellation=False, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return Replay(f"http://127.0.0.1:{runner.addresses[0][1]}", app[REPLAYER])

    yield start
    for runner in reversed(runners):
        await runner.cleanup()

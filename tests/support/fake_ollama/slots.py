"""How many generations the fake runs at once: all that arrive (the default), or a few."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Slots:
    """A semaphore around each generate/chat run, from its load to its final object.

    `limit = 1` is Ollama with `OLLAMA_NUM_PARALLEL=1`: requests are served one at a time,
    the others wait, headers held back, until the slot is free. None (the default) serves
    every request at once, as every test but the waiting ones expects.
    """

    def __init__(self) -> None:
        self._limit: int | None = None
        self._semaphore: asyncio.Semaphore | None = None

    @property
    def limit(self) -> int | None:
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        self._limit = value
        self._semaphore = None if value is None else asyncio.Semaphore(value)

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        semaphore = self._semaphore
        if semaphore is None:
            yield
            return
        async with semaphore:
            yield

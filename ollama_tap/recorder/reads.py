"""Database reads for the event loop: each in a daemon thread, awaited for a bounded time.

A database that accepts connections and never answers (a stopped server process, a
black-holed network before TCP notices) holds a blocking read for good, and no driver call
can be cut from another thread. So the API never waits on one longer than `timeout`
(answering 503), at most LIMIT reads are running or stuck at once, and their threads are
daemons: `asyncio.to_thread`'s executor is joined at exit, and one stuck read kept a
SIGTERMed proxy alive until the database came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ollama_tap.recorder.backend import StoreUnavailable

T = TypeVar("T")
LIMIT: Final = 4
"""Reads running at once (the PostgreSQL reader pool's size); the others wait their turn,
within the same bound."""


class Reads:
    """Runs blocking reads off the loop, `timeout` seconds at most each, LIMIT at a time."""

    def __init__(self, timeout: float, limit: int = LIMIT) -> None:
        self.timeout = timeout
        self._slots = asyncio.Semaphore(limit)

    async def run(self, func: Callable[..., T], *args: object) -> T:
        """`func(*args)` in a daemon thread; StoreUnavailable when it has not answered in
        `timeout` seconds (waiting for a free slot included)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        try:
            async with asyncio.timeout(self.timeout):
                await self._slots.acquire()
                threading.Thread(
                    target=self._work, args=(loop, future, func, args), daemon=True,
                    name="ollama-tap-read",
                ).start()  # fmt: skip
                return await asyncio.shield(future)
        except TimeoutError:
            future.add_done_callback(_retrieved)  # a late failure is nobody's to log
            raise StoreUnavailable(
                f"the database did not answer within {self.timeout:g} s (--db-timeout); "
                "it may be stopped, overloaded or behind a broken network"
            ) from None

    def _work(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[T],
        func: Callable[..., T],
        args: tuple[object, ...],
    ) -> None:
        try:
            outcome = functools.partial(_set, future, func(*args), None)
        except BaseException as exc:
            outcome = functools.partial(_set, future, None, exc)
        # The slot is freed when the read ends, however late: a stuck read keeps it, so
        # stuck reads never pile up past LIMIT threads.
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(outcome)
            loop.call_soon_threadsafe(self._slots.release)


def _set(future: asyncio.Future[T], result: T | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

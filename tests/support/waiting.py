"""Waiting for what happens off the test's own turn (a writer thread, an end hook)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], bool | Awaitable[bool]], within: float = 5.0) -> None:
    """Wait until `check()` holds (awaited when it returns an awaitable); fail after
    `within` seconds."""
    for _ in range(int(within / 0.01)):
        result = check()
        if await result if inspect.isawaitable(result) else result:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still not true after {within:g} s")

"""An observer for tests: it keeps the exchanges the proxy ends."""

from __future__ import annotations

import asyncio
from typing import Any


class Spy:
    """An observer that keeps every exchange it sees end."""

    name = "spy"

    def __init__(self) -> None:
        self.ended: list[Any] = []

    def response(self, ex: Any) -> None:
        self.ended.append(ex)

    error = response

    async def wait_ended(self, count: int = 1) -> list[Any]:
        """The ended exchanges once `count` have ended (at most 2 s; the caller asserts)."""
        for _ in range(200):
            if len(self.ended) >= count:
                break
            await asyncio.sleep(0.01)
        return self.ended

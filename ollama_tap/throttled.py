"""Log lines for events that can come in floods: the first at once, then at most one a
period per kind, each with the count since the last (a counter has every one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

EVERY: Final = 60.0
"""Seconds between two lines of one kind."""


class ThrottledLog:
    """`add(count, **kind)` logs `event` with `kind` and `count` (the events since the last
    line of that kind) when the kind's last line is `every` seconds old or there was none.
    Safe from any thread."""

    def __init__(
        self,
        log: Callable[..., Any],
        event: str,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        """A bound logger method, e.g. `structlog.get_logger(...).warning`."""
        self.event = event
        self.every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._unlogged: dict[tuple[tuple[str, str], ...], int] = {}
        self._logged: dict[tuple[tuple[str, str], ...], float] = {}

    def add(self, count: int = 1, **kind: str) -> None:
        key = tuple(sorted(kind.items()))
        now = self._clock()
        with self._lock:
            unlogged = self._unlogged.get(key, 0) + count
            due = now - self._logged.get(key, now - self.every) >= self.every
            self._unlogged[key] = 0 if due else unlogged
            if due:
                self._logged[key] = now
        if due:
            self.log(self.event, count=unlogged, **kind)

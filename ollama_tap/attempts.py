"""Wrong admin tokens per client address, and the wait they earn.

After LIMIT wrong tokens from one address within WINDOW seconds, that address's token
attempts are answered 429 without being compared, until the oldest of them leaves the
window: guessing slows to LIMIT tries a minute. Signed-in browsers (a valid session
cookie) are not held up, and requests with no token at all are not counted.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final

LIMIT: Final = 5
WINDOW: Final = 60.0
CAP: Final = 10_000
"""Most addresses tracked; past it, the one tracked longest is forgotten."""


class FailedAttempts:
    """The times of recent wrong tokens, by client address."""

    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        cap: int = CAP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.cap = cap
        self._clock = clock
        self._times: dict[str, deque[float]] = {}

    def _recent(self, address: str, now: float) -> deque[float] | None:
        times = self._times.get(address)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._times[address]
            return None
        return times

    def retry_after(self, address: str) -> int | None:
        """Whole seconds `address` must wait before its next attempt counts, or None."""
        now = self._clock()
        times = self._recent(address, now)
        if times is None or len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - now))

    def failed(self, address: str) -> None:
        now = self._clock()
        times = self._recent(address, now)
        if times is None:
            if len(self._times) >= self.cap:
                for known in list(self._times):
                    self._recent(known, now)
                if len(self._times) >= self.cap:
                    del self._times[next(iter(self._times))]
            times = self._times[address] = deque(maxlen=self.limit)
        times.append(now)

"""Wrong admin tokens, per client address and in all, and the 429 they earn.

Every token presented is compared (in constant time) before anything else, and a right one
always passes: no number of wrong tokens, from any address, locks the admin out (behind a
TLS front on the same host every client is 127.0.0.1). A wrong token is counted against its
address and against a budget shared by every address; past LIMIT from its address, or
GLOBAL_LIMIT from all of them, within WINDOW seconds, it is answered 429 with the wait
instead of 401, so rotating source addresses meets the shared budget.

The guard against guessing is the token's length, not this count (docs/security.md): a
right token must pass at once, so a guesser who ignores the 429 still learns which guess
was right. At least MIN_TOKEN characters (auth.py), and 256 random bits when generated,
leave nothing to guess online; the count makes a guesser visible (a warning each window
the shared budget is spent) and stops well-behaved clients holding a stale token.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final

LIMIT: Final = 5
"""Wrong tokens from one address within WINDOW before its wrong tokens earn a 429."""
GLOBAL_LIMIT: Final = 30
"""Wrong tokens from all addresses within WINDOW before every wrong token earns a 429."""
WINDOW: Final = 60.0
CAP: Final = 10_000
"""Most addresses tracked; past it, the one tracked longest is forgotten."""


class FailedAttempts:
    """The times of recent wrong tokens, by client address and in all."""

    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        cap: int = CAP,
        clock: Callable[[], float] = time.monotonic,
        global_limit: int = GLOBAL_LIMIT,
    ) -> None:
        self.limit = limit
        self.window = window
        self.cap = cap
        self._clock = clock
        self._times: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=global_limit)
        self.global_limit = global_limit

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

    def _wait(self, times: deque[float] | None, limit: int, now: float) -> int | None:
        if times is None or len(times) < limit:
            return None
        wait = times[0] + self.window - now
        return max(1, math.ceil(wait)) if wait > 0 else None

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until a wrong token from `address` is answered 401 again (its own
        count or the shared one left the window), or None when it would be now."""
        now = self._clock()
        waits = [
            self._wait(self._recent(address, now), self.limit, now),
            self._wait(self._all, self.global_limit, now),
        ]
        known = [w for w in waits if w is not None]
        return max(known) if known else None

    def spent(self) -> bool:
        """Whether the shared budget is spent now (every wrong token earns a 429)."""
        return self._wait(self._all, self.global_limit, self._clock()) is not None

    def failed(self, address: str) -> int | None:
        """Count a wrong token from `address`; the wait it earns (as `retry_after` said
        before it was counted), or None when it is answered 401."""
        wait = self.retry_after(address)
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
        self._all.append(now)
        return wait

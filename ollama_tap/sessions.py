"""Inspector sign-ins: random session ids, held in memory with an expiry.

The browser's cookie holds a session id, never the admin token: cookies ignore ports, so
a page served from any other port of the same host is sent them (RFC 6265 §8.5). An id
is worth only its own 12 hours on this process; it dies with the process, when the token
may change, and it cannot be turned back into the token.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Final

LIFETIME: Final = 12 * 3600.0
"""Seconds a sign-in lasts; then the printed URL (or /_tap/?token=…) is needed again."""
CAP: Final = 10_000
"""Most sessions kept: only a token holder opens one, but nothing else bounds them."""


class Sessions:
    """Open sessions by id, each with the monotonic time it ends."""

    def __init__(
        self,
        lifetime: float = LIFETIME,
        cap: int = CAP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime = lifetime
        self.cap = cap
        self._clock = clock
        self._ends: dict[str, float] = {}

    def open(self) -> str:
        """A new session id (256 random bits), valid for `lifetime` seconds."""
        now = self._clock()
        if len(self._ends) >= self.cap:
            self._ends = {sid: end for sid, end in self._ends.items() if end > now}
            while len(self._ends) >= self.cap:
                del self._ends[next(iter(self._ends))]  # the oldest sign-in
        sid = secrets.token_urlsafe(32)
        self._ends[sid] = now + self.lifetime
        return sid

    def valid(self, sid: str | None) -> bool:
        """Whether `sid` is an open session; an expired one is forgotten."""
        if sid is None:
            return False
        end = self._ends.get(sid)
        if end is None:
            return False
        if end <= self._clock():
            del self._ends[sid]
            return False
        return True

    def __len__(self) -> int:
        return len(self._ends)

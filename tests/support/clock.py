"""A monotonic clock a test moves by hand."""

from __future__ import annotations


class FakeClock:
    """Callable like `time.monotonic`; `now` is set or advanced by the test."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

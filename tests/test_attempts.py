"""The back-off on wrong admin tokens: per address, in a sliding window, bounded in size."""

from __future__ import annotations

from ollama_tap.attempts import LIMIT, WINDOW, FailedAttempts
from tests.support.clock import FakeClock


def test_the_limit_within_the_window_earns_a_wait_until_the_oldest_leaves_it() -> None:
    clock = FakeClock()
    attempts = FailedAttempts(clock=clock)
    for _ in range(LIMIT - 1):
        attempts.failed("10.0.0.1")
        clock.now += 1
    assert attempts.retry_after("10.0.0.1") is None
    attempts.failed("10.0.0.1")
    assert attempts.retry_after("10.0.0.1") == WINDOW - (LIMIT - 1)
    assert attempts.retry_after("10.0.0.2") is None  # per address
    clock.now = 1000.0 + WINDOW
    assert attempts.retry_after("10.0.0.1") is None  # the first left the window
    attempts.failed("10.0.0.1")
    assert attempts.retry_after("10.0.0.1") == 1


def test_spread_out_failures_never_add_up() -> None:
    clock = FakeClock()
    attempts = FailedAttempts(clock=clock)
    for _ in range(50):
        attempts.failed("10.0.0.1")
        clock.now += WINDOW / (LIMIT - 1)
        assert attempts.retry_after("10.0.0.1") is None


def test_addresses_past_the_cap_push_out_the_oldest() -> None:
    clock = FakeClock()
    attempts = FailedAttempts(limit=1, cap=3, clock=clock)
    for address in ("a", "b", "c", "d"):
        attempts.failed(address)
    assert [attempts.retry_after(a) is not None for a in "abcd"] == [False, True, True, True]

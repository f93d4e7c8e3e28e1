"""The back-off on wrong admin tokens: per address, in a sliding window, bounded in size."""

from __future__ import annotations

from ollama_tap.attempts import GLOBAL_LIMIT, LIMIT, WINDOW, FailedAttempts
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


def test_the_wait_is_what_retry_after_said_before_the_failure_was_counted() -> None:
    clock = FakeClock()
    attempts = FailedAttempts(clock=clock)
    assert [attempts.failed("10.0.0.1") for _ in range(LIMIT)] == [None] * LIMIT
    assert attempts.failed("10.0.0.1") == WINDOW


def test_failures_from_every_address_share_one_budget() -> None:
    clock = FakeClock()
    attempts = FailedAttempts(clock=clock)
    waits = [attempts.failed(f"10.0.{n}.1") for n in range(GLOBAL_LIMIT + 1)]
    assert waits[:GLOBAL_LIMIT] == [None] * GLOBAL_LIMIT
    assert waits[GLOBAL_LIMIT] == WINDOW and attempts.spent()
    assert attempts.retry_after("10.9.9.9") == WINDOW  # an address never seen waits too
    clock.now += WINDOW
    assert not attempts.spent() and attempts.retry_after("10.9.9.9") is None

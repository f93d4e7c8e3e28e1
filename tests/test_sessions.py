"""Inspector sessions: random ids that expire, bounded in number."""

from __future__ import annotations

from ollama_tap.sessions import LIFETIME, Sessions
from tests.support.clock import FakeClock


def test_a_session_lasts_its_lifetime_and_is_then_forgotten() -> None:
    clock = FakeClock()
    sessions = Sessions(clock=clock)
    sid = sessions.open()
    assert sessions.valid(sid) and not sessions.valid(None) and not sessions.valid("guess")
    clock.now += LIFETIME - 1
    assert sessions.valid(sid)
    clock.now += 1
    assert not sessions.valid(sid)
    assert len(sessions) == 0


def test_ids_are_random_and_long() -> None:
    sessions = Sessions()
    ids = {sessions.open() for _ in range(100)}
    assert len(ids) == 100 and min(len(sid) for sid in ids) >= 43


def test_the_cap_drops_expired_sessions_first_then_the_oldest() -> None:
    clock = FakeClock()
    sessions = Sessions(lifetime=10, cap=3, clock=clock)
    old = sessions.open()
    clock.now += 11
    kept = [sessions.open(), sessions.open()]
    assert len(sessions) == 3  # the expired one is still held, until room is needed
    newest = sessions.open()
    assert len(sessions) == 3 and not sessions.valid(old)
    assert all(sessions.valid(sid) for sid in [*kept, newest])
    sessions.open()
    assert not sessions.valid(kept[0]) and sessions.valid(kept[1]) and sessions.valid(newest)

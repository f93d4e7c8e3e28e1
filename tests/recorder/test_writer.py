"""The write path: bounded queue, drops and write errors counted, drained on stop, 0600."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters
from tests.recorder.conftest import sample
from tests.recorder.factory import chat_body, drive, exchange, make_settings, native_usage
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("blockbuster")


ERRORS = "ollama_tap_recorder_write_errors_total"


async def count(rec: Recorder) -> int:
    page, _ = await asyncio.to_thread(rec.store.page, Filters(), 1000)
    return len(page)


async def has(rec: Recorder, records: int) -> bool:
    return await count(rec) == records


async def test_full_queue_drops_and_counts(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path, recorder_queue=3), registry)
    for _ in range(5):  # before start: nothing drains the queue yet
        drive(rec, exchange(body=chat_body()))
    assert sample(registry, "ollama_tap_recorder_queue_depth") == 3
    assert sample(registry, "ollama_tap_records_dropped_total") == 2
    await rec.start()
    await rec.stop()
    assert await count(rec) == 3
    assert sample(registry, "ollama_tap_recorder_queue_depth") == 0


async def test_write_errors_are_counted_and_spare_the_rest(tmp_path: Path) -> None:
    rec, registry = await _started(tmp_path)
    drive(rec, exchange(body=chat_body(), ex_id="same"))
    drive(rec, exchange(body=chat_body(), ex_id="same"))  # violates the unique id
    drive(rec, exchange(body=chat_body(), ex_id="other"))
    await rec.stop()
    assert sample(registry, ERRORS) == 1
    assert await count(rec) == 2


async def test_stop_drains_everything_queued(tmp_path: Path) -> None:
    rec, registry = await _started(tmp_path)
    for _ in range(2_000):
        drive(rec, exchange(body=chat_body()))
    await rec.stop()
    assert await count(rec) == 1000  # the page limit
    _, cursor = await asyncio.to_thread(rec.store.page, Filters(), 1000)
    assert cursor is not None
    assert sample(registry, "ollama_tap_db_size_bytes") > 0


async def test_file_is_private(tmp_path: Path) -> None:
    rec, _ = await _started(tmp_path)
    drive(rec, exchange(body=chat_body()))
    await eventually(lambda: has(rec, 1))  # committed, so -wal and -shm exist

    def modes() -> dict[str, int]:
        data = tmp_path / "data"
        found = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir()}
        return {"dir": stat.S_IMODE(data.stat().st_mode), **found}

    got = await asyncio.to_thread(modes)
    await rec.stop()
    assert got == {
        "dir": 0o700,
        "records.db": 0o600,
        "records.db-wal": 0o600,
        "records.db-shm": 0o600,
    }


async def test_the_queue_is_bounded_by_bytes_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ollama_tap.recorder import writer

    monkeypatch.setattr(writer, "QUEUE_BYTES", 3 * 1024 * 1024)
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path), registry)
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}
    for _ in range(5):  # before start: nothing drains the queue yet
        drive(rec, exchange(body=big))
    assert sample(registry, "ollama_tap_recorder_queue_depth") == 2
    assert sample(registry, "ollama_tap_records_dropped_total") == 3
    assert rec.writer is not None and rec.writer.queued_bytes > 2 * 1024 * 1024
    await rec.start()
    for _ in range(50):  # traffic while the writer drains: the budget must not drift
        drive(rec, exchange(body=chat_body()))
    await rec.stop()
    assert await count(rec) == 52
    assert rec.writer.queued_bytes == 0


async def test_the_writer_survives_a_failing_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ollama_tap.recorder.writer import Writer

    rec, registry = await _started(tmp_path)
    failures = iter([OSError("disk went away")])

    def flaky_measure(self: Writer) -> None:
        if (exc := next(failures, None)) is not None:
            raise exc

    monkeypatch.setattr(Writer, "_measure", flaky_measure)
    drive(rec, exchange(body=chat_body()))
    await eventually(lambda: sample(registry, ERRORS) == 1)
    drive(rec, exchange(body=chat_body()))
    await rec.stop()
    assert sample(registry, ERRORS) == 1
    assert await count(rec) == 2


@pytest.mark.parametrize("bad", ["huge-int", "non-utf8-header"])
async def test_a_row_sqlite_cannot_take_costs_only_itself(tmp_path: Path, bad: str) -> None:
    # An integer past 64 bits raised OverflowError out of the insert, outside sqlite3.Error:
    # the whole batch was lost and its transaction left holding the write lock. A header's
    # non-UTF-8 bytes (lone surrogates from aiohttp) made the row impossible to build.
    rec, registry = await _started(tmp_path)
    ex = exchange(body=chat_body(), usage=native_usage(), ex_id="odd")
    if bad == "huge-int":
        assert ex.usage is not None
        ex.usage.eval_count = 10**19
    else:
        ex.request_headers["User-Agent"] = b"agent \xff\xfe".decode("utf-8", "surrogateescape")
    drive(rec, exchange(body=chat_body(), ex_id="before"))
    drive(rec, ex)
    drive(rec, exchange(body=chat_body(), ex_id="after"))
    await rec.stop()
    stored = {r["id"] for r in (await asyncio.to_thread(rec.store.page, Filters(), 10))[0]}
    if bad == "huge-int":
        assert stored == {"before", "after"}
        assert sample(registry, ERRORS) == 1
    else:
        assert stored == {"before", "odd", "after"}
        record = await asyncio.to_thread(rec.store.get, "odd")
        assert record is not None
        assert record["request"]["headers"]["User-Agent"] == "agent \ufffd\ufffd"
        assert sample(registry, ERRORS) == 0


async def test_a_database_deleted_while_serving_is_made_again(tmp_path: Path) -> None:
    # SQLite would write on into the unlinked file without a word; the writer notices at
    # its next measurement (about a second), says so, counts it and starts a new file.
    rec, registry = await _started(tmp_path)
    drive(rec, exchange(body=chat_body(), ex_id="before"))
    path = rec.store.path
    await eventually(lambda: has(rec, 1))
    await asyncio.to_thread(_delete, path)
    for i in range(40):  # a write each 50 ms, past the measurement period
        drive(rec, exchange(body=chat_body(), ex_id=f"after-{i}"))
        await asyncio.sleep(0.05)
    await rec.stop()
    assert stat.S_IMODE((await asyncio.to_thread(path.stat)).st_mode) == 0o600
    assert sample(registry, ERRORS) == 1
    ids = {r["id"] for r in (await asyncio.to_thread(rec.store.page, Filters(), 100))[0]}
    assert "after-39" in ids and "before" not in ids


def _delete(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


async def test_an_idle_writer_sleeps_until_a_record_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wake with nothing to do takes the GIL from the event loop for nothing: a record
    # wakes the thread, and only the first of a batch needs to.
    from ollama_tap.recorder import writer

    rounds = _count_rounds(monkeypatch)
    monkeypatch.setattr(writer, "FLUSH_EVERY", 1.0)  # the batch's gathering: ample time
    rec, _ = await _started(tmp_path)
    await asyncio.sleep(0.3)
    assert rounds == []  # polling every 50 ms would have made about six rounds by now
    for i in range(3):
        drive(rec, exchange(body=chat_body(), ex_id=f"r{i}"))
    await eventually(lambda: has(rec, 3))
    assert rounds[0] == 3  # one wake, one batch
    await rec.stop()


async def test_a_failing_prune_is_not_retried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the prune due and failing (a replaced file that cannot be reopened, say), a
    # round that ran straight into the next would spin the thread, logging each time.
    from ollama_tap.recorder import writer

    rec, registry = await _started(tmp_path)
    rounds = _count_rounds(monkeypatch)

    def failing_measure(self: writer.Writer) -> None:
        raise OSError("the file cannot be reopened")

    monkeypatch.setattr(writer.Writer, "_measure", failing_measure)
    monkeypatch.setattr(writer, "PRUNE_EVERY", 0.2)
    assert rec.writer is not None
    rec.writer._next_prune = 0.0  # due now; the thread wakes for the next record
    drive(rec, exchange(body=chat_body()))
    await asyncio.sleep(0.5)
    await rec.stop()
    # Measured twice (prune, then the write's own measurement) per 0.2 s prune at most,
    # each failure followed by a 50 ms pause: a handful of rounds, not thousands.
    assert 1 <= len(rounds) <= 15
    errors = sample(registry, ERRORS)
    assert errors is not None and 1 <= errors <= 15
    assert await count(rec) == 1


async def test_a_write_is_measured_even_when_none_follows(tmp_path: Path) -> None:
    # The file is measured at most once a second after writes; a write inside that second is
    # measured when it is up, with no further write to wake the thread. Here that is how a
    # database deleted under the proxy is noticed after a single write.
    rec, registry = await _started(tmp_path)
    drive(rec, exchange(body=chat_body(), ex_id="before"))
    await eventually(lambda: has(rec, 1))  # written and measured (the first measurement)
    await asyncio.to_thread(_delete, rec.store.path)
    drive(rec, exchange(body=chat_body(), ex_id="after"))  # written into the deleted file
    await eventually(lambda: sample(registry, ERRORS) == 1)
    await rec.stop()


def _count_rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The writer's rounds from here on, each as the records queued when it began."""
    from ollama_tap.recorder.writer import Writer

    rounds: list[int] = []
    real_round = Writer._round

    def counted(self: Writer) -> None:
        rounds.append(len(self._queue))
        real_round(self)

    monkeypatch.setattr(Writer, "_round", counted)
    return rounds


async def _started(tmp_path: Path) -> tuple[Recorder, CollectorRegistry]:
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path), registry)
    await rec.start()
    return rec, registry

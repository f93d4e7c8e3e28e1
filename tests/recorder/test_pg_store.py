"""The PostgreSQL store against a real server: the same records as SQLite, instance
filters, migrations once under concurrency, retention in batches under a lock, and a
server that goes away and comes back."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.metrics.registered import RecorderMetrics
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.backend import RowsRefused
from ollama_tap.recorder.pg_schema import RETENTION_LOCK, VERSION
from ollama_tap.recorder.pg_sink import PRUNE_BATCH, PostgresSink
from ollama_tap.recorder.retention import Retention
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters, Store
from ollama_tap.recorder.stores import sink_for
from tests.recorder.conftest import sample
from tests.recorder.factory import (
    WALL0,
    chat_body,
    drive,
    exchange,
    make_settings,
    native_usage,
    pieces,
)
from tests.support.postgres import PgServer
from tests.support.waiting import eventually

DROPPED = "ollama_tap_records_dropped_total"
ERRORS = "ollama_tap_recorder_write_errors_total"


async def _record(rec: Recorder, n: int, prefix: str = "r", **kw: Any) -> None:
    for i in range(n):
        ex = exchange(body=chat_body(), usage=native_usage(), ex_id=f"{prefix}{i}", **kw)
        drive(rec, ex, pieces(3))


async def _recorded_into(db: Path | str, tmp_path: Path, instance: str) -> Recorder:
    rec = Recorder(make_settings(tmp_path, db=db, instance=instance), CollectorRegistry())
    await rec.start()
    await _record(rec, 5, started_wall=WALL0)
    await rec.stop()
    return rec


async def test_both_stores_read_back_the_same_records(tmp_path: Path, pg_url: str) -> None:
    # `replay` and the inspector read through Store: whichever store is behind it, the
    # record dicts must be the same, key for key and value for value.
    lite = await _recorded_into(tmp_path / "data" / "records.db", tmp_path, "box")
    pg = await _recorded_into(pg_url, tmp_path, "box")
    for read in (
        lambda s: s.page(Filters(), 3),
        lambda s: s.page(Filters(), 3, "4"),
        lambda s: s.get("r2"),
        lambda s: list(s.each(Filters())),
    ):
        assert await asyncio.to_thread(read, lite.store) == await asyncio.to_thread(read, pg.store)
    record = await asyncio.to_thread(pg.store.get, "r2")
    assert record is not None and record["output"] == "tok1 tok2 "
    assert record["instance"] == "box"
    assert record["upstream"] == "http://127.0.0.1:11434"


async def test_records_carry_their_instance_and_filter_by_it(
    tmp_path: Path, db: Path | str
) -> None:
    for name in ("a", "b"):
        rec = Recorder(make_settings(tmp_path, db=db, instance=f"box-{name}"), CollectorRegistry())
        await rec.start()
        await _record(rec, 3, prefix=name)
        await rec.stop()
    store = Store(db)
    page, _ = await asyncio.to_thread(store.page, Filters(instance="box-b"), 10)
    assert [r["id"] for r in page] == ["b2", "b1", "b0"]
    assert {r["instance"] for r in page} == {"box-b"}
    exported = await asyncio.to_thread(lambda: list(store.each(Filters(instance="box-a"))))
    assert [r["id"] for r in exported] == ["a0", "a1", "a2"]
    store.close()


def test_taps_starting_together_migrate_once(pg_url: str) -> None:
    sinks = [PostgresSink(pg_url) for _ in range(8)]
    start = threading.Barrier(len(sinks))
    failures: list[BaseException] = []

    def open_one(sink: PostgresSink) -> None:
        start.wait()
        try:
            sink.open()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM ollama_tap_migrations").fetchall()
    assert sorted(v for (v,) in versions) == list(range(1, VERSION + 1))
    for sink in sinks:
        sink.close()


def test_another_programs_records_table_is_refused(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE records (x int)")
    with pytest.raises(SchemaError, match="did not make"):
        PostgresSink(pg_url).open()


def _rows(sink: PostgresSink, n: int, *, started: float, nbytes: int = 1000) -> None:
    rec = Recorder(make_settings(Path("/nonexistent")), CollectorRegistry())
    assert rec.writer is not None
    from ollama_tap.recorder.record import to_row

    rows = []
    for i in range(n):
        ex = exchange(body=chat_body(), ex_id=f"x{started}-{i}", started_wall=started)
        rec.request(ex)
        row = to_row(ex, ex.metadata["recorder"], rec.mode, rec.writer.origin)
        rows.append({**row, "nbytes": nbytes})
    for i in range(0, n, 100):
        sink.insert(rows[i : i + 100])


def _count(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM records").fetchone()
    assert row is not None
    return int(row[0])


def test_retention_by_age_and_size_in_batches(pg_url: str) -> None:
    sink = PostgresSink(pg_url)
    sink.open()
    _rows(sink, PRUNE_BATCH + 500, started=1000.0)  # old: more than one batch
    _rows(sink, 300, started=1_000_000.0)
    deleted = sink.prune(Retention(max_age=1000.0, max_bytes=10**9), now=1_000_500.0)
    assert deleted == PRUNE_BATCH + 500
    assert _count(pg_url) == 300
    # 300 rows of 1000 bytes over a 100,000-byte limit: the oldest 200 go, exactly.
    assert sink.prune(Retention(max_age=10**9, max_bytes=100_000), now=1_000_500.0) == 200
    assert _count(pg_url) == 100
    sink.close()


def test_retention_runs_in_one_tap_at_a_time(pg_url: str) -> None:
    sink = PostgresSink(pg_url)
    sink.open()
    _rows(sink, 10, started=1000.0)
    old = Retention(max_age=1.0, max_bytes=10**9)
    with psycopg.connect(pg_url, autocommit=True) as other_tap:
        other_tap.execute("SELECT pg_advisory_lock(%s, %s)", RETENTION_LOCK)
        assert sink.prune(old, now=10_000.0) == 0  # the other tap is pruning: skipped
        assert _count(pg_url) == 10
        other_tap.execute("SELECT pg_advisory_unlock(%s, %s)", RETENTION_LOCK)  # it is done
    assert sink.prune(old, now=10_000.0) == 10
    sink.close()


def test_the_insert_is_idempotent_and_a_bad_row_is_refused_alone(pg_url: str) -> None:
    sink = PostgresSink(pg_url)
    sink.open()
    _rows(sink, 3, started=5.0)
    _rows(sink, 3, started=5.0)  # a batch tried again after a commit cut off: no duplicate
    assert _count(pg_url) == 3
    bad = {"id": "bad", "eval_tokens": 10**19}
    with pytest.raises(RowsRefused):
        sink.insert([{**_a_row(pg_url), **bad}])
    sink.close()


def _a_row(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT * FROM records LIMIT 1")
        names = [d.name for d in cur.description or ()]
        values = cur.fetchone()
    assert values is not None
    return {n: v for n, v in zip(names, values, strict=True) if n != "seq"}


async def test_a_row_the_server_refuses_costs_only_itself(tmp_path: Path, pg_url: str) -> None:
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path, db=pg_url), registry)
    await rec.start()
    odd = exchange(body=chat_body(), usage=native_usage(), ex_id="odd")
    assert odd.usage is not None
    odd.usage.eval_count = 10**19  # past BIGINT
    drive(rec, exchange(body=chat_body(), ex_id="before"))
    drive(rec, odd)
    drive(rec, exchange(body=chat_body(), ex_id="after"))
    await rec.stop()
    page, _ = await asyncio.to_thread(rec.store.page, Filters(), 10)
    assert {r["id"] for r in page} == {"before", "after"}
    assert sample(registry, ERRORS) == 1


async def test_a_server_away_costs_records_only_past_the_bound(
    tmp_path: Path, own_server: PgServer
) -> None:
    url = await asyncio.to_thread(own_server.new_database)
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path, db=url, recorder_queue=20), registry)
    await rec.start()
    await _record(rec, 10, prefix="up")
    await eventually(lambda: _has(rec, 10), within=10)
    await asyncio.to_thread(own_server.stop)
    await _record(rec, 50, prefix="away")  # 20 queue (one batch in hand), the rest dropped
    await eventually(lambda: (sample(registry, ERRORS) or 0) >= 1, within=10)
    dropped = sample(registry, DROPPED)
    assert 29 <= dropped <= 30
    await asyncio.to_thread(own_server.start)
    await _record(rec, 5, prefix="back")
    await eventually(lambda: _has(rec, 65 - int(dropped)), within=15)
    await rec.stop()
    ids = [r["id"] for r in await asyncio.to_thread(lambda: list(rec.store.each(Filters())))]
    assert len(ids) == len(set(ids)) == 65 - dropped
    assert {f"back{i}" for i in range(5)} <= set(ids)


async def _has(rec: Recorder, n: int) -> bool:
    try:
        page, _ = await asyncio.to_thread(rec.store.page, Filters(), 1000)
    except Exception:
        return False
    return len(page) == n


async def test_a_server_down_at_start_is_written_to_when_it_comes(
    tmp_path: Path, own_server: PgServer
) -> None:
    url = await asyncio.to_thread(own_server.new_database)
    await asyncio.to_thread(own_server.stop)
    registry = CollectorRegistry()
    rec = Recorder(make_settings(tmp_path, db=url), registry)
    await rec.start()  # does not fail: the proxy serves, records wait for the database
    await _record(rec, 3)
    await asyncio.to_thread(own_server.start)
    await eventually(lambda: _has(rec, 3), within=15)
    await rec.stop()
    assert sample(registry, DROPPED) == 0


def test_export_reads_through_a_server_side_cursor(pg_url: str) -> None:
    sink = PostgresSink(pg_url)
    sink.open()
    _rows(sink, 1000, started=7.0)
    store = Store(pg_url)
    seen = []
    with psycopg.connect(pg_url) as watcher:
        for i, record in enumerate(store.each(Filters())):
            if i == 500:  # mid-export: the server holds the cursor, the client a page
                seen = watcher.execute(
                    "SELECT query FROM pg_stat_activity WHERE application_name = 'ollama-tap'"
                    " AND query LIKE 'FETCH%%'"
                ).fetchall()
            assert record["id"] == f"x7.0-{i}"
    assert seen and "FETCH FORWARD 200" in seen[0][0]
    sink.close()
    store.close()


def test_a_postgres_sink_needs_no_file(tmp_path: Path, pg_url: str) -> None:
    sink = sink_for(pg_url, RecorderMetrics(CollectorRegistry()))
    sink.open()
    size = sink.size()
    assert size is not None and size > 0
    sink.close()
    assert list(tmp_path.iterdir()) == []

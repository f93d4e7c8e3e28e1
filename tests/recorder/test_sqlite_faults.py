"""A SQLite file locked by another process past the busy timeout keeps the batch and tries
it again, as a PostgreSQL outage does (the batch in hand used to be thrown away)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters
from tests.recorder.conftest import sample
from tests.recorder.factory import drive, exchange, make_settings, pieces
from tests.support.waiting import eventually

DROPPED = "ollama_tap_records_dropped_total"
ERRORS = "ollama_tap_recorder_write_errors_total"


async def test_a_locked_file_loses_no_record(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    settings = make_settings(tmp_path, recorder_queue=50)
    rec = Recorder(settings, registry)
    await rec.start()
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:  # another process's exclusive lock, past the 5 s busy timeout
        conn = sqlite3.connect(settings.db_path, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(30)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        await asyncio.to_thread(locked.wait, 10)
        with capture_logs() as lines:
            ids = []
            for i in range(30):
                ex = exchange(endpoint="/api/generate", body={"model": "m", "prompt": f"p{i}"})
                drive(rec, ex, pieces(2))
                ids.append(ex.id)
            await eventually(lambda: (sample(registry, ERRORS) or 0) >= 1, within=30)
    finally:
        release.set()
        await asyncio.to_thread(holder.join)
    await eventually(lambda: sample(registry, "ollama_tap_recorder_queue_depth") == 0, within=30)
    await rec.stop()
    stored = [r["id"] for r in await asyncio.to_thread(lambda: list(rec.store.each(Filters())))]
    assert sorted(stored) == sorted(ids)
    assert (sample(registry, DROPPED) or 0) == 0
    said = [line for line in lines if line["event"] == "recorder_store_unavailable"]
    assert len(said) == 1 and "locked" in said[0]["error"]

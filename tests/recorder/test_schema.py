"""The schema carries a version; older files are migrated, newer ones refused."""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.recorder import Recorder
from ollama_tap.recorder.schema import (
    MIGRATIONS,
    VERSION,
    WAL_LIMIT,
    SchemaError,
    open_writer,
)
from tests.recorder.factory import WALL0, make_settings, stored
from tests.support.old_schema import build_v1


async def test_v1_file_is_migrated_and_keeps_its_records(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    await asyncio.to_thread(build_v1, settings.db_path)
    rec = Recorder(settings, CollectorRegistry())
    await rec.start()
    await rec.stop()
    r = await stored(rec, "old-1")
    assert (r["started"], r["model"], r["model_digest"], r["cached_tokens"]) == (
        WALL0, "llama3.2:latest", None, None,
    )  # fmt: skip

    def inspect() -> tuple[int, int, int]:
        with sqlite3.connect(settings.db_path) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            nbytes = conn.execute("SELECT nbytes FROM records").fetchone()[0]
            vacuum = conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        return version, nbytes, vacuum

    assert await asyncio.to_thread(inspect) == (VERSION, 256 + len('{"options":{}}'), 2)


def test_a_v11_file_loses_the_version_index_no_read_used(tmp_path: Path) -> None:
    """Every insert paid for `records_ollama_version` (a page more in the WAL a commit);
    the reads by version (upgrade-check) go by the scan or `records_outcome` instead."""
    path = tmp_path / "records.db"
    with sqlite3.connect(path) as conn:
        for statements in MIGRATIONS[:11]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 11")
    conn = open_writer(path)
    try:
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(records)")}
        plan = " ".join(
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM records WHERE ollama_version IN (?, ?) "
                "AND outcome = ? AND seq > ? ORDER BY seq LIMIT 500",
                ("0.30.5", "0.31.0", "ok", 0),
            )
        )
    finally:
        conn.close()
    assert "records_ollama_version" not in indexes
    assert {"records_box", "records_outcome", "records_model"} <= indexes
    assert "records_outcome" in plan


def test_newer_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(SchemaError, match="upgrade ollama-tap"):
        open_writer(path)
    assert path.read_bytes() == before  # refused before a byte changed (mode, WAL, vacuum)
    assert not Path(f"{path}-wal").exists()


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    path.chmod(0o644)
    before = path.read_bytes()
    with pytest.raises(SchemaError, match=r"is not an ollama-tap database .*users"):
        open_writer(path)
    assert path.read_bytes() == before and path.stat().st_mode & 0o777 == 0o644


def test_processes_opening_one_new_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    # Each read the version before the others had migrated, and two ran the migration
    # ("table records already exists"): the version is read under the write lock now.
    errors: list[BaseException] = []

    def open_one(path: Path, start: threading.Barrier) -> None:
        start.wait()
        try:
            open_writer(path).close()
        except BaseException as exc:
            errors.append(exc)

    for attempt in range(5):
        start = threading.Barrier(3)
        path = tmp_path / f"race{attempt}.db"
        threads = [threading.Thread(target=open_one, args=(path, start)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_the_write_ahead_log_is_capped(tmp_path: Path) -> None:
    conn = open_writer(tmp_path / "records.db")
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_LIMIT
    conn.close()


def test_serve_names_a_corrupt_database_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    path.write_bytes(b"not a database, but 4 KiB of something else" * 100)
    path.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", "serve", "--port", str(port), "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OLLAMA_TAP_UPSTREAM": "http://127.0.0.1:9"},
    )
    assert done.returncode == 2
    assert f"ollama-tap: the database {path} cannot be used" in done.stderr
    assert "Traceback" not in done.stderr

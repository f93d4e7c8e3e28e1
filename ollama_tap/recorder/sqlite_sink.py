"""The SQLite store's write side: one connection, batches in a transaction, the file
watched for being deleted or replaced under the running proxy."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any, Final

import structlog

from ollama_tap.metrics.registered import RecorderMetrics
from ollama_tap.recorder.backend import RowsRefused, StoreError, StoreUnavailable
from ollama_tap.recorder.record import COLUMNS, VALUES
from ollama_tap.recorder.retention import Retention, prune
from ollama_tap.recorder.schema import open_writer

_INSERT: Final = (
    f"INSERT INTO records ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
)

log = structlog.get_logger("ollama_tap.recorder")


class SqliteSink:
    """The file has exactly this one writer: retention runs on the same connection, so no
    transaction ever waits on another."""

    def __init__(self, path: Path, metrics: RecorderMetrics) -> None:
        self.path = path
        self.metrics = metrics
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None
        """The database file the connection writes to, as opened (device, inode)."""

    def open(self) -> None:
        """Open the file; a no-op while it is open (the writer calls it again after the
        file was locked or full, before it tries the batch again)."""
        if self._conn is None:
            self._conn = open_writer(self.path)
            self._file = _identity(self.path)

    def insert(self, rows: list[dict[str, Any]]) -> None:
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN")
            conn.executemany(_INSERT, map(VALUES, rows))
            conn.execute("COMMIT")
        except Exception as exc:
            # sqlite3's errors, and a value it cannot bind (an integer past 64 bits, a lone
            # surrogate): either way the transaction must end here, or it would hold the
            # write lock.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                if _passing(exc):
                    # Locked by another process past the busy timeout, or the disk full:
                    # the batch is kept and tried again, as a PostgreSQL outage's is.
                    raise StoreUnavailable(f"the database {self.path} is {exc}") from exc
                # The file's other failures (I/O): every row would fail alike, one busy
                # timeout each, if they were tried one by one.
                raise StoreError(str(exc)) from exc
            raise RowsRefused(str(exc)) from exc

    def prune(self, retention: Retention, now: float) -> int:
        assert self._conn is not None
        try:
            return prune(self._conn, retention, now)
        except sqlite3.Error as exc:
            raise StoreError(str(exc)) from exc

    def size(self) -> int:
        if _identity(self.path) != self._file:
            self._reopen()
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                size += os.stat(f"{self.path}{suffix}").st_size
        return size

    def _reopen(self) -> None:
        """The file was deleted or replaced under the running proxy: SQLite would go on
        writing to the unlinked one without a word, and the records would vanish with it.
        A new file is made (and said so); what went into the old one since the last
        check (at most about MEASURE_EVERY seconds of records) is lost with it."""
        log.error("recorder_file_replaced", path=str(self.path))
        self.metrics.write_errors.inc()
        conn = open_writer(self.path)  # if this fails, the old connection stays, retried later
        assert self._conn is not None
        self._conn.close()
        self._conn = conn
        self._file = _identity(self.path)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _passing(exc: sqlite3.OperationalError) -> bool:
    """Whether the failure is one that passes by itself: a lock, a busy file, a full disk."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL}
    text = str(exc)
    return "locked" in text or "full" in text


def _identity(path: Path) -> tuple[int, int] | None:
    """The file at `path` (device, inode), or None when there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino

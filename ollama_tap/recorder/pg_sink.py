"""The PostgreSQL store's write side: one connection of the writer thread, each batch one
transaction of pipelined INSERTs (idempotent on the record id), retention under an
advisory lock."""

from __future__ import annotations

from typing import Any, Final

import psycopg

from ollama_tap.recorder.backend import DB_TIMEOUT, RowsRefused, StoreUnavailable
from ollama_tap.recorder.pg_schema import RETENTION_LOCK, connect, migrate, one, reachable
from ollama_tap.recorder.record import COLUMNS, VALUES
from ollama_tap.recorder.retention import Retention

PRUNE_BATCH: Final = 1000
"""Rows per DELETE: each commits alone, so retention never holds many row locks, or any
for long, whatever it has to delete."""
_OLD: Final = (
    "DELETE FROM records WHERE seq IN"
    " (SELECT seq FROM records WHERE started < %s ORDER BY seq LIMIT %s)"
)
_OLDEST: Final = (
    "DELETE FROM records WHERE seq IN (SELECT seq FROM"
    " (SELECT seq, nbytes, sum(nbytes) OVER (ORDER BY seq) AS run FROM"
    "  (SELECT seq, nbytes FROM records ORDER BY seq LIMIT %s) o) r"
    " WHERE run - nbytes < %s) RETURNING nbytes"
)
"""The oldest rows, up to a batch, until their summed estimate covers the excess."""


_INSERT: Final = (
    f"INSERT INTO records ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    " ON CONFLICT (id) DO NOTHING"
)
"""One prepared statement, its rows sent in one pipeline (psycopg's executemany): a fifth
of the client CPU of one multi-row INSERT, whose 3,600 parameters the server must plan."""


class PostgresSink:
    """Reconnects by itself: `open` after a failure connects again (and migrates, the
    first time a database is met); the writer keeps the batch meanwhile."""

    def __init__(self, url: str, timeout: float = DB_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._migrated = False

    def open(self) -> None:
        if self._conn is not None and not self._conn.closed:
            return
        with reachable():
            conn = connect(self.url, self.timeout)
            try:
                if not self._migrated:
                    migrate(conn)
                    self._migrated = True
            except BaseException:
                conn.close()
                raise
        self._conn = conn

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            raise StoreUnavailable("the PostgreSQL database is not connected")
        return self._conn

    def insert(self, rows: list[dict[str, Any]]) -> None:
        conn = self._connection()
        try:
            with reachable(), conn.transaction():  # all of the batch or none
                conn.cursor().executemany(_INSERT, map(VALUES, rows))
        except StoreUnavailable:
            self._lose_connection()
            raise
        except (psycopg.Error, ValueError, TypeError, OverflowError) as exc:
            # A value the server or the driver cannot take (NUL in text, an integer past
            # 64 bits, a lone surrogate): the other rows must not share its fate.
            raise RowsRefused(str(exc)) from exc

    def prune(self, retention: Retention, now: float) -> int:
        """In one tap at a time: the others skip it while the lock is held."""
        conn = self._connection()
        try:
            with reachable():
                if not one(conn, "SELECT pg_try_advisory_lock(%s, %s)", RETENTION_LOCK):
                    return 0
                try:
                    return _prune(conn, retention, now)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", RETENTION_LOCK)
        except StoreUnavailable:
            self._lose_connection()
            raise

    def size(self) -> int | None:
        """The table with its indexes and out-of-line values, as the server reports it."""
        if self._conn is None or self._conn.closed:
            return None
        try:
            return int(one(self._conn, "SELECT pg_total_relation_size('records')"))
        except psycopg.Error:
            return None

    def _lose_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._lose_connection()


def _prune(conn: psycopg.Connection[Any], retention: Retention, now: float) -> int:
    """Age first, then size: the records' summed estimate (`nbytes`, as SQLite's retention
    uses) above the limit goes, oldest first. The server's own files are not the measure:
    deleted rows leave room that autovacuum hands to new rows, not back to the disk."""
    deleted = 0
    while True:
        cur = conn.execute(_OLD, (now - retention.max_age, PRUNE_BATCH))
        deleted += max(cur.rowcount, 0)
        if cur.rowcount < PRUNE_BATCH:
            break
    excess = int(one(conn, "SELECT coalesce(sum(nbytes), 0) FROM records")) - retention.max_bytes
    while excess > 0:
        freed = [int(r[0]) for r in conn.execute(_OLDEST, (PRUNE_BATCH, excess))]
        if not freed:
            break
        deleted += len(freed)
        excess -= sum(freed)
    return deleted

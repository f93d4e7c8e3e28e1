"""Retention: delete records past the age or size limit, then give the space back.

Size is the file's used pages (page_count − freelist_count, times page_size). The oldest
records are deleted until their summed ``nbytes`` estimate covers the excess; the next
run catches any shortfall of the estimate. Deleted pages are returned to the file system
by ``PRAGMA incremental_vacuum`` (the file is created with ``auto_vacuum = INCREMENTAL``;
in WAL mode the main file shrinks at the checkpoint), and ``wal_checkpoint(TRUNCATE)``
then empties the write-ahead log — no full VACUUM, which would rewrite the whole file.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Retention:
    max_age: float
    """Seconds a record is kept."""
    max_bytes: int
    """Size of the database above which the oldest records go."""


def used_bytes(conn: sqlite3.Connection) -> int:
    page_count = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((page_count - free) * page_size)


def prune(conn: sqlite3.Connection, retention: Retention, now: float) -> int:
    """Delete what the limits exclude; returns the number of records deleted."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute("DELETE FROM records WHERE started < ?", (now - retention.max_age,))
        deleted = cur.rowcount
        excess = used_bytes(conn) - retention.max_bytes
        if excess > 0:
            row = conn.execute(
                "SELECT seq FROM (SELECT seq, SUM(nbytes) OVER (ORDER BY seq) AS run"
                " FROM records) WHERE run >= ? ORDER BY seq LIMIT 1",
                (excess,),
            ).fetchone()
            cut = "DELETE FROM records" + (" WHERE seq <= ?" if row else "")
            deleted += conn.execute(cut, (row[0],) if row else ()).rowcount
    except BaseException:
        if conn.in_transaction:  # a full disk may have ended it already: keep its error
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if deleted:
        # executescript steps the pragma to completion; execute() frees only one page.
        conn.executescript("PRAGMA incremental_vacuum;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return deleted

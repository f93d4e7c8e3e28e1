"""The SQLite file: creation with safe permissions, pragmas, schema version and migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Final

from ollama_tap.dbfile import check as check_db_file
from ollama_tap.dbfile import create_private

# Each entry upgrades the schema by one version (PRAGMA user_version = its index + 1).
# A shipped entry is never edited: a change is a new entry, so every older file can be
# brought forward one step at a time.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # v1: one row per exchange; the heavy parts (doc, timeline) last so that reading the
    # scalar columns of a page of records does not walk their overflow pages.
    (
        """CREATE TABLE records (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            started REAL NOT NULL,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            query TEXT,
            endpoint TEXT NOT NULL,
            model TEXT,
            client TEXT,
            status INTEGER,
            outcome TEXT NOT NULL,
            streamed INTEGER NOT NULL,
            mode TEXT NOT NULL,
            ttft REAL, ttfc REAL, server_ttft REAL, client_overhead REAL,
            load REAL, queue_wait REAL, prefill REAL, decode REAL, total REAL, duration REAL,
            prompt_tokens INTEGER, eval_tokens INTEGER, context_len INTEGER,
            done_reason TEXT,
            request_bytes INTEGER NOT NULL,
            response_bytes INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            error_message TEXT,
            doc BLOB,
            timeline BLOB
        )""",
        "CREATE INDEX records_started ON records(started)",
    ),
    # v2: the model's digest at the time, the cached prompt count, and a per-row size
    # estimate so size-based retention can pick its cut-off in one query.
    (
        "ALTER TABLE records ADD COLUMN model_digest TEXT",
        "ALTER TABLE records ADD COLUMN cached_tokens INTEGER",
        "ALTER TABLE records ADD COLUMN nbytes INTEGER NOT NULL DEFAULT 0",
        "UPDATE records SET nbytes ="
        " 256 + coalesce(length(doc), 0) + coalesce(length(timeline), 0)",
        "CREATE INDEX records_model ON records(model, seq)",
        "CREATE INDEX records_endpoint ON records(endpoint, seq)",
        "CREATE INDEX records_outcome ON records(outcome, seq)",
    ),
    # v3: why the request was sent upstream a second time (relay/retry.py), NULL when once.
    ("ALTER TABLE records ADD COLUMN retried TEXT",),
    # v4: the truncation verdict (ollama_tap/truncation/), JSON, NULL when none; the partial
    # index serves `--truncated` without touching the other rows.
    (
        "ALTER TABLE records ADD COLUMN truncation TEXT",
        "CREATE INDEX records_truncated ON records(seq) WHERE truncation IS NOT NULL",
    ),
    # v5: the load event (JSON, ollama_tap/loads/) of a request that triggered or waited for a
    # model load, NULL for the others.
    ("ALTER TABLE records ADD COLUMN load_event TEXT",),
    # v6: which app sent the exchange (ollama_tap/attribution.py), filtered on like the model.
    (
        "ALTER TABLE records ADD COLUMN client_name TEXT",
        "CREATE INDEX records_client_name ON records(client_name, seq)",
    ),
    # v7: the tap that made the record (--instance) and the upstream it went to, so that
    # records from several taps in one database can be told apart and filtered.
    (
        "ALTER TABLE records ADD COLUMN instance TEXT",
        "ALTER TABLE records ADD COLUMN upstream TEXT",
        "CREATE INDEX records_instance ON records(instance, seq)",
    ),
    # v8: the reply body's bytes as relayed with each read's offset (ollama_tap/rawreply.py),
    # full mode only, NULL otherwise: what `replay serve` sends back unchanged.
    ("ALTER TABLE records ADD COLUMN reply_raw BLOB",),
    # v9: the Ollama version that served the exchange (the poller's last /api/version read),
    # NULL when not known yet; `upgrade-check` groups the records by it.
    (
        "ALTER TABLE records ADD COLUMN ollama_version TEXT",
        "CREATE INDEX records_ollama_version ON records(ollama_version, seq)",
    ),
    # v10: the reload guard's change to the request body (JSON, ollama_tap/guard.py), NULL
    # for a body that went as the client sent it.
    ("ALTER TABLE records ADD COLUMN reload_guard TEXT",),
    # v11: the box (--upstream NAME) that served the exchange and why the router chose it
    # (ollama_tap/boxes/router.py); the route is NULL with one box.
    (
        "ALTER TABLE records ADD COLUMN box TEXT",
        "ALTER TABLE records ADD COLUMN route TEXT",
        "CREATE INDEX records_box ON records(box, seq)",
    ),
    # v12: no index on ollama_version. SQLite's planner never chose it for the reads that
    # filter by version (`upgrade-check`, ollama_tap/upgrade/samples.py: the newest version
    # scans from the newest row, a version's records go by records_outcome), while every
    # insert paid for it, one more page written to the WAL per commit: about 10,000
    # instructions a record (docs/performance-log.md, 2026-12-07, "one index less").
    # PostgreSQL keeps its own: there the index costs the server, not the proxy.
    ("DROP INDEX IF EXISTS records_ollama_version",),
)
VERSION: Final = len(MIGRATIONS)
WAL_LIMIT: Final = 64 * 1024 * 1024
"""Bytes the write-ahead log is truncated to after a checkpoint (SQLite keeps it at its
largest otherwise: one burst of large rows would hold that much disk for good)."""


class SchemaError(RuntimeError):
    """The file cannot be used by this version; the message names the fix."""


def _check_usable(path: Path) -> None:
    """Refuse, before changing a byte of it, a file this version must not write to: a
    newer schema, or another program's SQLite database."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        version = user_version(conn)
        tables = [row[0] for row in conn.execute(_TABLES)]
    finally:
        conn.close()
    if version > VERSION:
        raise SchemaError(_newer(version))
    if version == 0 and tables:
        raise SchemaError(
            f"{path} is not an ollama-tap database (it holds the tables "
            f"{', '.join(sorted(tables)[:5])}); point --db at another file."
        )


_TABLES: Final = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"


def _newer(version: int) -> str:
    return (
        f"the database has schema v{version}, newer than this ollama-tap understands "
        f"(v{VERSION}); upgrade ollama-tap or point --db at another file."
    )


def open_writer(path: Path) -> sqlite3.Connection:
    """Open (creating and migrating as needed) the connection that does all the writing."""
    check_db_file(path)
    if path.exists() and path.stat().st_size > 0:
        _check_usable(path)
    create_private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    # Switching the file's mode (auto-vacuum, WAL) is answered "locked" at once, without the
    # busy timeout, while another process does the same to a new file: all of it is
    # idempotent, so it is tried again for up to the busy timeout.
    tries = 0
    while True:
        try:
            _set_up(conn)
            return conn
        except sqlite3.OperationalError as exc:
            tries += 1
            if "locked" not in str(exc) or tries >= _SETUP_TRIES:
                conn.close()
                raise
            time.sleep(0.05)


_SETUP_TRIES: Final = 100
"""Tries of the file's set-up, 50 ms apart: the busy timeout's 5 s."""


def _set_up(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        # Incremental auto-vacuum lets retention hand freed pages back to the file system
        # (`PRAGMA incremental_vacuum`); switching an existing file over needs one VACUUM.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode = WAL")
    # WAL + NORMAL survives a killed process (only an OS crash may lose the last commits).
    conn.execute("PRAGMA synchronous = NORMAL")
    # Pruned rows are overwritten with zeros, so deleted prompts do not linger in free pages.
    conn.execute("PRAGMA secure_delete = ON")
    # A burst of large rows grows the WAL; each checkpoint then truncates it back to this,
    # instead of leaving the file at its largest for good.
    conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
    migrate(conn)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to VERSION, one transaction per step. The version is read under the
    write lock: two processes opening one new file at once would otherwise both migrate."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = user_version(conn)
            if version > VERSION:
                raise SchemaError(_newer(version))
            if version == VERSION:
                conn.execute("COMMIT")
                return
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the API and the CLI (never creates the file)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("PRAGMA busy_timeout = 5000")
    version = user_version(conn)
    if version != VERSION:
        conn.close()
        raise SchemaError(
            f"the database has schema v{version} and this ollama-tap reads v{VERSION}; "
            "start `ollama-tap serve` with this --db once to migrate it."
        )
    return conn

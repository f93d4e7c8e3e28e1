"""The PostgreSQL database: connecting, the schema with its own migrations, and the
advisory locks that let several taps share one database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from ollama_tap.recorder.backend import DB_TIMEOUT, StoreUnavailable
from ollama_tap.recorder.schema import SchemaError

_DOUBLE: Final = "DOUBLE PRECISION"
# Each entry upgrades the schema by one version, recorded as a row of ollama_tap_migrations.
# A shipped entry is never edited: a change is a new entry. The numbering is this store's
# own (SQLite's reached the same columns in more steps).
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # v1: the columns of SQLite's records table, the heavy parts (doc, timeline, reply_raw)
    # last, and the same indexes: every filter is an index walked newest first.
    (
        f"""CREATE TABLE records (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            started {_DOUBLE} NOT NULL,
            method TEXT NOT NULL,
            path TEXT NOT NULL,
            query TEXT,
            endpoint TEXT NOT NULL,
            model TEXT,
            model_digest TEXT,
            client TEXT,
            status INTEGER,
            outcome TEXT NOT NULL,
            streamed INTEGER NOT NULL,
            mode TEXT NOT NULL,
            ttft {_DOUBLE}, ttfc {_DOUBLE}, server_ttft {_DOUBLE}, client_overhead {_DOUBLE},
            load {_DOUBLE}, queue_wait {_DOUBLE}, prefill {_DOUBLE}, decode {_DOUBLE},
            total {_DOUBLE}, duration {_DOUBLE},
            prompt_tokens BIGINT, cached_tokens BIGINT, eval_tokens BIGINT, context_len BIGINT,
            done_reason TEXT,
            request_bytes BIGINT NOT NULL,
            response_bytes BIGINT NOT NULL,
            chunks BIGINT NOT NULL,
            error_message TEXT,
            retried TEXT,
            truncation TEXT,
            load_event TEXT,
            client_name TEXT,
            instance TEXT,
            upstream TEXT,
            nbytes BIGINT NOT NULL DEFAULT 0,
            doc BYTEA,
            timeline BYTEA,
            reply_raw BYTEA
        )""",
        "CREATE INDEX records_started ON records(started)",
        "CREATE INDEX records_model ON records(model, seq)",
        "CREATE INDEX records_endpoint ON records(endpoint, seq)",
        "CREATE INDEX records_outcome ON records(outcome, seq)",
        "CREATE INDEX records_instance ON records(instance, seq)",
        "CREATE INDEX records_client_name ON records(client_name, seq)",
        "CREATE INDEX records_truncated ON records(seq) WHERE truncation IS NOT NULL",
    ),
    # v2: the Ollama version that served the exchange (SQLite's v9).
    (
        "ALTER TABLE records ADD COLUMN ollama_version TEXT",
        "CREATE INDEX records_ollama_version ON records(ollama_version, seq)",
    ),
    # v3: the reload guard's change to the request body (SQLite's v10).
    ("ALTER TABLE records ADD COLUMN reload_guard TEXT",),
    # v4: the box that served the exchange and why the router chose it (SQLite's v11).
    (
        "ALTER TABLE records ADD COLUMN box TEXT",
        "ALTER TABLE records ADD COLUMN route TEXT",
        "CREATE INDEX records_box ON records(box, seq)",
    ),
)
VERSION: Final = len(MIGRATIONS)
LOCKS: Final = 0x6F6C6C74  # "ollt": the first key of every advisory lock this program takes
MIGRATE_LOCK: Final = (LOCKS, 1)
RETENTION_LOCK: Final = (LOCKS, 2)
CONNECT_TIMEOUT: Final = 5
"""Seconds to wait for a connection: the writer retries, a read fails with the reason."""
IDLE_IN_TRANSACTION: Final = 600
"""Seconds the server keeps a transaction that waits on its client (an export whose reader
stopped reading): a client that hangs must not hold its locks and snapshot for good."""
_MIGRATIONS_TABLE: Final = """CREATE TABLE IF NOT EXISTS ollama_tap_migrations (
    version INTEGER PRIMARY KEY,
    applied DOUBLE PRECISION NOT NULL
)"""


@contextmanager
def reachable() -> Iterator[None]:
    """Turn the errors of a server that cannot be reached (down, restarting, refusing the
    connection or the login) into StoreUnavailable, whose message names the server."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise StoreUnavailable(f"the PostgreSQL database cannot be reached: {exc}") from exc


def connect(url: str, timeout: float = DB_TIMEOUT, **kwargs: Any) -> psycopg.Connection[Any]:
    """An autocommit connection: each statement commits alone, so none holds locks longer
    than it runs. The password comes from the URL, PGPASSWORD or ~/.pgpass (libpq's rules)."""
    return psycopg.connect(url, autocommit=True, **connect_options(url, timeout), **kwargs)


def connect_options(url: str, timeout: float) -> dict[str, Any]:
    """libpq's settings that bound every wait on the server to about `timeout` seconds.

    A server that hangs (a stuck lock, a slow disk) has its statements cut by its own
    timers; a network that drops the packets is noticed by TCP (keepalives, and data left
    unacknowledged past `tcp_user_timeout`). A server whose process is stopped while its
    kernel still answers TCP is noticed by none of them: the callers bound their own wait
    (recorder/reads.py, the writer's watch), and the threads waiting are daemons.
    """
    ms = int(timeout * 1000)
    server = (
        f"-c statement_timeout={ms} -c lock_timeout={ms} "
        f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION * 1000}"
    )
    given = conninfo_to_dict(url).get("options")
    return {
        "connect_timeout": CONNECT_TIMEOUT,
        "application_name": "ollama-tap",
        "keepalives": 1,
        "keepalives_idle": max(1, int(timeout / 3)),
        "keepalives_interval": max(1, int(timeout / 9)),
        "keepalives_count": 3,
        "tcp_user_timeout": ms,
        "options": f"{given} {server}" if given else server,
    }


def version_of(conn: psycopg.Connection[Any]) -> int | None:
    """The schema version, or None when this database holds no ollama-tap schema yet."""
    if not _exists(conn, "ollama_tap_migrations"):
        return None
    found = one(conn, "SELECT max(version) FROM ollama_tap_migrations")
    return 0 if found is None else int(found)


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    return bool(one(conn, "SELECT to_regclass(%s) IS NOT NULL", (table,)))


def one(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first value of the first row (as a tuple, whatever the connection's row factory)."""
    row = conn.cursor(row_factory=tuple_row).execute(sql, params).fetchone()
    return None if row is None else row[0]


def migrate(conn: psycopg.Connection[Any]) -> None:
    """Bring the schema to VERSION, one transaction per step, under an advisory lock: taps
    starting together wait for the first, then find nothing left to do."""
    conn.execute("SELECT pg_advisory_lock(%s, %s)", MIGRATE_LOCK)
    try:
        version = version_of(conn)
        if version is None and _exists(conn, "records"):
            raise SchemaError(
                "the PostgreSQL database holds a records table that ollama-tap did not make; "
                "point --db at another database."
            )
        conn.execute(_MIGRATIONS_TABLE)
        version = version or 0
        if version > VERSION:
            raise SchemaError(_newer(version))
        for step in range(version, VERSION):
            with conn.transaction():
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO ollama_tap_migrations VALUES (%s, %s)", (step + 1, time.time())
                )
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", MIGRATE_LOCK)


def _newer(version: int) -> str:
    return (
        f"the PostgreSQL database has schema v{version}, newer than this ollama-tap "
        f"understands (v{VERSION}); upgrade ollama-tap or point --db at another database."
    )


def check_readable(version: int | None) -> None:
    if version is not None and version != VERSION:
        raise SchemaError(
            f"the PostgreSQL database has schema v{version} and this ollama-tap reads "
            f"v{VERSION}; start `ollama-tap serve` with this --db once to migrate it."
        )

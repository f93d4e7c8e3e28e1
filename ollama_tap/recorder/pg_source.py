"""The PostgreSQL store's read side: a small connection pool shared by the API's threads,
and exports through a server-side cursor (constant memory, however many records)."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ollama_tap.recorder.backend import DB_TIMEOUT, Row
from ollama_tap.recorder.pg_schema import (
    CONNECT_TIMEOUT,
    check_readable,
    connect,
    connect_options,
    reachable,
    version_of,
)

PAGE: Final = 200
"""Rows fetched from the export's cursor at a time."""
POOL_SIZE: Final = 4


def _dialect(sql: str) -> str:
    # Store writes `?` placeholders (sqlite3's); psycopg takes `%s`. The store's SQL has
    # no literal `?` or `%` for this to catch.
    return sql.replace("?", "%s")


_POOLS: dict[str, ConnectionPool[psycopg.Connection[Any]]] = {}
"""One pool per database and process, closed at exit: a pool left to the garbage collector
would be collected on whichever thread dropped it last, and its workers cannot be joined
from one of their own."""
_POOLS_LOCK: Final = threading.Lock()


def _pool(url: str, timeout: float) -> ConnectionPool[psycopg.Connection[Any]]:
    with _POOLS_LOCK:
        pool = _POOLS.get(url)
        if pool is None or pool.closed:
            pool = _POOLS[url] = ConnectionPool(
                url,
                min_size=1,
                max_size=POOL_SIZE,
                open=False,
                timeout=CONNECT_TIMEOUT,
                name="ollama-tap-reader",
                # A server restarted since: its dead connections are replaced, not handed out.
                check=ConnectionPool.check_connection,
                configure=_configure,
                kwargs={**connect_options(url, timeout), "autocommit": True},
            )
            pool.open()
        return pool


@atexit.register
def _close_pools() -> None:
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close()
        _POOLS.clear()


class PostgresSource:
    def __init__(self, url: str, timeout: float = DB_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._schema_ok = False

    def _ready(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the schema is there to read (checked until it is: a tap may create it
        while the inspector is open)."""
        if not self._schema_ok:
            version = version_of(conn)
            check_readable(version)
            self._schema_ok = version is not None
        return self._schema_ok

    def rows(self, sql: str, params: list[Any]) -> list[Row]:
        with reachable(), _pool(self.url, self.timeout).connection() as conn:
            if not self._ready(conn):
                return []
            rows: list[Row] = conn.execute(_dialect(sql), params).fetchall()
            return rows

    def each(self, clauses: list[str], params: list[Any]) -> Iterator[Row]:
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = _dialect(f"SELECT * FROM records{where} ORDER BY seq")
        with reachable(), connect(self.url, self.timeout, row_factory=dict_row) as conn:
            if not self._ready(conn):
                return
            # A named cursor lives in a transaction; the rows come PAGE at a time.
            with conn.transaction(), conn.cursor(name="ollama_tap_each") as cur:
                cur.itersize = PAGE
                cur.execute(sql, params)
                yield from cur

    def close(self) -> None:
        with _POOLS_LOCK:
            pool = _POOLS.pop(self.url, None)
        if pool is not None:
            pool.close()


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.row_factory = dict_row

"""The SQLite store's read side: a read-only connection per call, which WAL lets run
beside the writer. A missing file reads as empty (``--record off``, or nothing recorded)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Final

from ollama_tap.recorder.backend import Row
from ollama_tap.recorder.schema import open_reader

PAGE: Final = 200
"""Rows per read of an export: each page is its own short read, so a long export never
holds one read transaction open (which would keep the writer's log from being reset)."""


class SqliteSource:
    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, sql: str, params: list[Any]) -> list[Row]:
        if not self.path.exists():
            return []
        with closing(open_reader(self.path)) as conn:
            conn.row_factory = sqlite3.Row
            rows: list[Row] = conn.execute(sql, params).fetchall()
            return rows

    def each(self, clauses: list[str], params: list[Any]) -> Iterator[Row]:
        last = 0
        while True:
            where = " AND ".join([*clauses, "seq > ?"])
            rows = self.rows(
                f"SELECT * FROM records WHERE {where} ORDER BY seq LIMIT {PAGE}", [*params, last]
            )
            yield from rows
            if len(rows) < PAGE:
                return
            last = rows[-1]["seq"]

    def close(self) -> None:
        """Nothing is held between calls."""

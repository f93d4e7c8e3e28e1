"""The store interface: what the writer thread writes through (`Sink`) and what `Store`
reads through (`Source`), for a SQLite file or a PostgreSQL database.

The writer and the reader own everything the two stores share (the queue, batches, the
record dicts); an implementation owns only its connections and its SQL dialect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol

from ollama_tap.recorder.retention import Retention

DB_TIMEOUT: Final = 30.0
"""Seconds a read or a PostgreSQL statement may take (Settings.db_timeout's default)."""


class StoreError(RuntimeError):
    """The store failed a write or a prune as a whole (locked, full, I/O)."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now (down, refusing, restarting): a write is kept
    and tried again, a read is answered with this message."""


class RowsRefused(StoreError):
    """The store refused these rows for what they hold (a value it cannot take): tried
    again one by one, so one bad row costs only itself."""


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


class Sink(Protocol):
    """The write side, used by the writer thread alone."""

    def open(self) -> None:
        """Connect, create or migrate the schema (blocking). StoreUnavailable when the
        database cannot be reached yet; SchemaError when it must not be written."""

    def insert(self, rows: list[dict[str, Any]]) -> None:
        """Commit the rows in one transaction, or raise: StoreUnavailable (keep them and
        try later; the insert is idempotent on the record id), RowsRefused, StoreError."""

    def prune(self, retention: Retention, now: float) -> int:
        """Delete what the limits exclude; the number deleted. Raises StoreError."""

    def size(self) -> int | None:
        """Bytes the records take, or None when it cannot be told now."""

    def close(self) -> None: ...


class Source(Protocol):
    """The read side: blocking calls, safe from several threads at once."""

    def rows(self, sql: str, params: list[Any]) -> list[Row]:
        """The rows of one query (`?` placeholders); none when there is no database yet."""

    def each(self, clauses: list[str], params: list[Any]) -> Iterator[Row]:
        """Every full row matching the clauses, oldest first, at constant memory."""

    def close(self) -> None: ...

"""The read side: list (filtered, cursor-paginated), fetch and iterate records.

Every method is blocking (the CLI calls them directly; the API through
``asyncio.to_thread``) and opens its own read-only connection, which WAL lets run beside
the writer. A missing file reads as empty (``--record off``, or nothing recorded yet).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from proxy.names import canonical_model
from proxy.recorder.output import from_reply, from_timeline
from proxy.recorder.record import COLUMNS
from proxy.recorder.schema import open_reader
from proxy.recorder.timeline import unpack

SUMMARY: Final = ("seq", *(c for c in COLUMNS if c not in {"nbytes", "doc", "timeline"}))
_PAGE: Final = 200


@dataclass(frozen=True, slots=True)
class Filters:
    model: str | None = None
    endpoint: str | None = None
    outcome: str | None = None
    client: str | None = None
    """A client name (proxy/attribution.py), matched as stored."""
    since: float | None = None
    """Unix seconds, inclusive."""
    until: float | None = None
    """Unix seconds, exclusive."""
    truncated: bool = False
    """Only records with a truncation verdict."""

    def where(self) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("model = ?", canonical_model(self.model) if self.model else None),
            ("endpoint = ?", self.endpoint),
            ("outcome = ?", self.outcome),
            ("client_name = ?", self.client),
            ("started >= ?", self.since),
            ("started < ?", self.until),
        ):
            if value is not None:
                clauses.append(column)
                params.append(value)
        if self.truncated:
            clauses.append("truncation IS NOT NULL")
        return clauses, params


def summary(row: sqlite3.Row) -> dict[str, Any]:
    out = {name: row[name] for name in SUMMARY}
    out["streamed"] = bool(out["streamed"])
    out["truncation"] = orjson.loads(out["truncation"]) if out["truncation"] else None
    if out["load_event"] is not None:
        out["load_event"] = orjson.loads(out["load_event"])
    return out


def full(row: sqlite3.Row) -> dict[str, Any]:
    """Every stored field: the columns, the document, the timeline and the output."""
    out = summary(row)
    doc = orjson.loads(row["doc"]) if row["doc"] else {}
    out.update(doc)
    timeline = unpack(row["timeline"]) if row["timeline"] else None
    out["timeline"] = timeline
    reply = ((doc.get("response") or {}).get("body") or {}).get("json")
    if timeline is not None and timeline["texts"] is not None:
        out.update(from_timeline(timeline))
    elif isinstance(reply, dict) and out["mode"] == "full":
        out.update(from_reply(reply))
    return out


class Store:
    """Reads the recordings database at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _query(self, sql: str, params: list[Any]) -> list[sqlite3.Row]:
        if not self.path.exists():
            return []
        with closing(open_reader(self.path)) as conn:
            conn.row_factory = sqlite3.Row
            return conn.execute(sql, params).fetchall()

    def page(
        self, filters: Filters, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first; the cursor (opaque) continues after the last record returned."""
        clauses, params = filters.where()
        if cursor is not None:
            clauses.append("seq < ?")
            params.append(int(cursor))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query(
            f"SELECT {', '.join(SUMMARY)} FROM records{where} ORDER BY seq DESC LIMIT ?",
            [*params, limit + 1],
        )
        page = [summary(r) for r in rows[:limit]]
        return page, str(page[-1]["seq"]) if len(rows) > limit else None

    def get(self, record_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM records WHERE id = ?", [record_id])
        return full(rows[0]) if rows else None

    def ids_like(self, pattern: str, limit: int = 5) -> list[str]:
        """Up to `limit` ids matching a LIKE pattern (what a short id stands for), newest first."""
        rows = self._query(
            "SELECT id FROM records WHERE id LIKE ? ORDER BY seq DESC LIMIT ?", [pattern, limit]
        )
        return [r["id"] for r in rows]

    def each(self, filters: Filters) -> Iterator[dict[str, Any]]:
        """Every matching record in full, oldest first, read a page at a time."""
        clauses, params = filters.where()
        last = 0
        while True:
            where = " AND ".join([*clauses, "seq > ?"])
            rows = self._query(
                f"SELECT * FROM records WHERE {where} ORDER BY seq LIMIT {_PAGE}", [*params, last]
            )
            yield from (full(r) for r in rows)
            if len(rows) < _PAGE:
                return
            last = rows[-1]["seq"]


def parse_time(value: str) -> float:
    """Unix seconds, or an ISO 8601 date or time (UTC unless it names an offset)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time; give unix seconds or ISO 8601 (2025-01-31T12:00:00Z)"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()

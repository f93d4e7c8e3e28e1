"""The read side: list (filtered, cursor-paginated), fetch and iterate records.

Every method is blocking (the CLI calls them directly; the API through
``asyncio.to_thread``). The SQL and the record dicts are the same for every store; the
`Source` (SQLite or PostgreSQL, see stores.py) only runs the queries. A database with
nothing recorded yet reads as empty.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from ollama_tap.ollama.names import canonical_model
from ollama_tap.rawreply import unpack as unpack_raw
from ollama_tap.recorder.backend import DB_TIMEOUT, Row, Source
from ollama_tap.recorder.output import from_reply, from_timeline
from ollama_tap.recorder.record import COLUMNS
from ollama_tap.recorder.stores import source_for
from ollama_tap.recorder.timeline import unpack

_HEAVY: Final = frozenset({"nbytes", "doc", "timeline", "reply_raw"})
SUMMARY: Final = ("seq", *(c for c in COLUMNS if c not in _HEAVY))


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    model: str | None = None
    endpoint: str | None = None
    outcome: str | None = None
    client: str | None = None
    """A client name (ollama_tap/attribution.py), matched as stored."""
    since: float | None = None
    """Unix seconds, inclusive."""
    until: float | None = None
    """Unix seconds, exclusive."""
    truncated: bool = False
    """Only records with a truncation verdict."""
    instance: str | None = None
    """The tap that made the record (its --instance)."""
    box: str | None = None
    """The box that served it (its --upstream NAME)."""

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
            ("instance = ?", self.instance),
            ("box = ?", self.box),
        ):
            if value is not None:
                clauses.append(column)
                params.append(value)
        if self.truncated:
            clauses.append("truncation IS NOT NULL")
        return clauses, params


def summary(row: Row) -> dict[str, Any]:
    out = {name: row[name] for name in SUMMARY}
    out["streamed"] = bool(out["streamed"])
    out["truncation"] = orjson.loads(out["truncation"]) if out["truncation"] else None
    for column in ("load_event", "reload_guard"):
        if out[column] is not None:
            out[column] = orjson.loads(out[column])
    return out


def full(row: Row) -> dict[str, Any]:
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
    """Reads the recordings database at `location`: a SQLite file or a PostgreSQL URL."""

    def __init__(self, location: Path | str, timeout: float = DB_TIMEOUT) -> None:
        self.location = location
        self.source: Source = source_for(location, timeout)

    @property
    def path(self) -> Path:
        """The SQLite file (a PostgreSQL store has none)."""
        if not isinstance(self.location, Path):
            raise TypeError("a PostgreSQL store has no file")
        return self.location

    def page(
        self, filters: Filters, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first; the cursor (opaque) continues after the last record returned."""
        clauses, params = filters.where()
        if cursor is not None:
            clauses.append("seq < ?")
            params.append(int(cursor))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.source.rows(
            f"SELECT {', '.join(SUMMARY)} FROM records{where} ORDER BY seq DESC LIMIT ?",
            [*params, limit + 1],
        )
        page = [summary(r) for r in rows[:limit]]
        return page, str(page[-1]["seq"]) if len(rows) > limit else None

    def get(self, record_id: str) -> dict[str, Any] | None:
        rows = self.source.rows("SELECT * FROM records WHERE id = ?", [record_id])
        return full(rows[0]) if rows else None

    def reply_reads(self, record_id: str) -> list[tuple[float, bytes]] | None:
        """The reply's bytes as relayed, read by read with each read's offset (full mode,
        within --reply-tee-limit), or None: kept out of `get`, which the API and exports use."""
        rows = self.source.rows("SELECT reply_raw FROM records WHERE id = ?", [record_id])
        blob = rows[0]["reply_raw"] if rows else None
        return unpack_raw(bytes(blob)) if blob else None

    def ids_like(self, pattern: str, limit: int = 5) -> list[str]:
        """Up to `limit` ids matching a LIKE pattern (what a short id stands for), newest first."""
        rows = self.source.rows(
            "SELECT id FROM records WHERE id LIKE ? ORDER BY seq DESC LIMIT ?", [pattern, limit]
        )
        return [r["id"] for r in rows]

    def each(self, filters: Filters) -> Iterator[dict[str, Any]]:
        """Every matching record in full, oldest first, at constant memory."""
        clauses, params = filters.where()
        return (full(r) for r in self.source.each(clauses, params))

    def close(self) -> None:
        """Let go of pooled connections (PostgreSQL); the store opens them again if used."""
        self.source.close()


_AGO: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)", re.IGNORECASE)
_UNIT: Final = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_time(value: str, now: float | None = None) -> float:
    """Unix seconds, an ISO 8601 date or time (UTC unless it names an offset), or a time
    that long ago: `90s`, `30m`, `1h`, `2d`, `1w` (what a person asks `--since` first)."""
    try:
        return float(value)
    except ValueError:
        pass
    ago = _AGO.fullmatch(value.strip())
    if ago:
        start = time.time() if now is None else now
        return start - float(ago[1]) * _UNIT[ago[2].lower()]
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time; give a time ago (30m, 1h, 2d), unix seconds or "
            "ISO 8601 (2025-01-31T12:00:00Z)"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()

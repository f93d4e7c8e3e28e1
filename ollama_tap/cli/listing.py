"""The `records list` table: every number whole, columns dropped by priority to fit.

A cell is never cut with "…": a number cut short reads as another number (`29…` for
2935.8 ms). When the table is wider than the terminal, whole columns go, decoration before
signal: the method, status, endpoint and figures go first, then the outcome (the marks say
`error` for every outcome but `ok`; `records show` names it), while the id, when, which
model, which app, TTFT, duration and the marks stay at 80 columns. Only free text (model,
endpoint, client) is shortened, and a signal column goes only once every free text is as
short as it gets. Piped with no COLUMNS set, nothing is dropped or shortened.

The marks are what a person scans a list for, as words: `truncated` (a truncation verdict),
`cold` (a cold start), `slow` (a decode rate under half the median of the same model's
listed records, at least three of them), and `error` for an exchange that did not end `ok`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from ollama_tap.cli.figures import compact_time, is_cold, rate, seconds, short_ids, usage_of
from ollama_tap.terminal import escaped

Row = dict[str, Any]
GAP: Final = 2
SHRINK_MIN: Final = 8
SHRINK_AT: Final = 25
SIGNAL: Final = 80
"""Columns from this priority up are signal: every free text is shortened before one goes."""


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    cell: Callable[[Row], str]
    right: bool = False
    """Numbers are right-aligned, so their units and digits line up."""
    keep: int = 0
    """Priority: the column with the lowest is dropped first; 100 is never dropped."""
    cap: int = 0
    """Free text: the width it is shortened to (with "…") before columns above
    SHRINK_AT go, and further, to SHRINK_MIN, once nothing else can; 0 for never."""


def _tokens(r: Row) -> str:
    shown = [str(r[k]) if r[k] is not None else "" for k in ("prompt_tokens", "eval_tokens")]
    return "/".join(shown).strip("/")


def _load(r: Row) -> str:
    return "" if r["load"] is None else seconds(r["load"]) + (" cold" if is_cold(r) else "")


def _truncation(r: Row) -> str:
    verdict = r.get("truncation") or {}
    return f"{verdict['kind']} ({verdict['rule']})" if verdict else ""


SLOW_SHARE: Final = 0.5
"""A decode rate under this share of its model's median (in the listing) is `slow`."""
SLOW_PEERS: Final = 3


def slow_below(records: Sequence[Row]) -> dict[str, float]:
    """Per model, the decode rate under which a record is marked slow."""
    rates: dict[str, list[float]] = {}
    for r in records:
        decode = usage_of(r).decode_rate
        if decode is not None:
            rates.setdefault(r["model"] or "", []).append(decode)
    return {
        model: statistics.median(found) * SLOW_SHARE
        for model, found in rates.items()
        if len(found) >= SLOW_PEERS
    }


def marks(r: Row, slow: dict[str, float]) -> str:
    """The words a person scans for: truncated, cold, slow, error (any outcome but `ok`)."""
    found = []
    if r.get("truncation"):
        found.append("truncated")
    if is_cold(r):
        found.append("cold")
    decode = usage_of(r).decode_rate
    if decode is not None and decode < slow.get(r["model"] or "", 0.0):
        found.append("slow")
    if r["outcome"] != "ok":
        found.append("error")
    return " ".join(found)


def columns(ids: dict[str, str], now: float, slow: dict[str, float]) -> tuple[Column, ...]:
    """The columns, in the order shown; `ids` maps each id to what is printed for it."""
    return (
        Column("id", lambda r: ids[r["id"]], keep=100),
        Column("time", lambda r: compact_time(r["started"], now), keep=85),
        Column("method", lambda r: r["method"] or "", keep=10),
        Column("endpoint", lambda r: r["endpoint"] or "", keep=45, cap=14),
        Column("model", lambda r: r["model"] or "", keep=80, cap=16),
        Column("client", lambda r: r.get("client_name") or "", keep=82, cap=12),
        Column("instance", lambda r: r.get("instance") or "", keep=35, cap=14),
        Column("box", lambda r: r.get("box") or "", keep=60, cap=12),
        Column("status", lambda r: str(r["status"] or ""), right=True, keep=20),
        Column("outcome", lambda r: r["outcome"], keep=50),
        Column("ttft", lambda r: seconds(r["ttft"]), right=True, keep=100),
        Column("duration", lambda r: seconds(r["duration"]), right=True, keep=100),
        Column("load", _load, right=True, keep=30),
        Column("tok in/out", _tokens, right=True, keep=40),
        Column("decode", lambda r: rate(usage_of(r).decode_rate), right=True, keep=30),
        Column("truncation", _truncation, keep=25),
        Column("marks", lambda r: marks(r, slow), keep=100),
    )


def width_wanted(stream: IO[str]) -> int | None:
    """The terminal's width; when piped, COLUMNS if set, else None (no limit)."""
    if stream.isatty():
        return shutil.get_terminal_size().columns
    columns_env = os.environ.get("COLUMNS", "")
    return int(columns_env) if columns_env.isdigit() else None


def _fit(cols: list[Column], widths: dict[str, int], limit: int) -> list[Column]:
    def total() -> int:
        return sum(widths[c.header] for c in cols) + GAP * (len(cols) - 1)

    def shrink(to: Callable[[Column], int]) -> None:
        for col in (c for c in cols if c.cap):
            over = total() - limit
            if over > 0:
                least = max(to(col), len(col.header))
                widths[col.header] = max(least, min(widths[col.header], widths[col.header] - over))

    for col in sorted((c for c in cols if c.keep < 100), key=lambda c: c.keep):
        if col.keep > SHRINK_AT:
            shrink(lambda c: c.cap)
        if col.keep >= SIGNAL:  # a signal column goes only once the free text is short
            shrink(lambda c: SHRINK_MIN)
        if total() <= limit:
            break
        cols = [c for c in cols if c is not col]
    shrink(lambda c: SHRINK_MIN)
    return cols


def _cut(text: str, width: int) -> str:
    # The middle goes: a model's name and tag, an endpoint's start and end, stay.
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def render(records: Sequence[Row], width: int | None, now: float | None = None) -> list[str]:
    """The table's lines: a header, then one line a record (newest first, as given)."""
    ids = short_ids([r["id"] for r in records])
    every = list(columns(ids, time.time() if now is None else now, slow_below(records)))
    # Columns that would say nothing: no verdict, no client name, one tap's records only.
    silent = {
        "truncation": not any(r.get("truncation") for r in records),
        "client": not any(r.get("client_name") for r in records),
        "instance": len({r.get("instance") for r in records}) < 2,
        "box": len({r.get("box") for r in records}) < 2,
    }
    cells_of_marks = [c.cell(r) for c in every if c.header == "marks" for r in records]
    silent["marks"] = not any(cells_of_marks)
    every = [c for c in every if not silent.get(c.header, False)]
    return table_lines(records, every, width)


def table_lines(rows: Sequence[Row], every: Sequence[Column], width: int | None) -> list[str]:
    """Any table by these rules: a header, then one line a row, fitted to `width`."""
    cells = [{c.header: escaped(c.cell(r)) for c in every} for r in rows]
    widths = {c.header: max([len(c.header), *(len(row[c.header]) for row in cells)]) for c in every}
    shown = list(every) if width is None else _fit(list(every), widths, width)

    def line(values: dict[str, str]) -> str:
        parts = []
        for c in shown:
            text = _cut(values[c.header], widths[c.header])
            parts.append(text.rjust(widths[c.header]) if c.right else text.ljust(widths[c.header]))
        return (" " * GAP).join(parts).rstrip()

    return [line({c.header: c.header for c in shown}), *(line(row) for row in cells)]


def print_table(records: Sequence[Row], title: str, stream: IO[str] | None = None) -> None:
    out = sys.stdout if stream is None else stream
    lines = render(records, width_wanted(out)) if records else []
    print("\n".join([title, *lines]), file=out)

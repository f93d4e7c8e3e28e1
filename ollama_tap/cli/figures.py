"""A record's numbers as a person reads them: units, local times, derived rates, short ids."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from ollama_tap.exchange import Usage
from ollama_tap.measures import cold_start
from ollama_tap.recorder.store import Store

_NS: Final = 1_000_000_000
_ID: Final = re.compile(r"^([0-9a-f]+)-(\d+)$")
"""exchange.new_id(): the run (pid and start time in hex), a dash, a zero-padded counter."""
RUN_MIN: Final = 4
"""Fewest characters of the run part a short id keeps, as git keeps at least 4 of a hash."""


def seconds(value: float | None) -> str:
    """A duration with its unit, never cut: `812 µs`, `31.4 ms`, `2.94 s`, `3 min 05 s`."""
    if value is None:
        return ""
    size = abs(value)
    if size == 0:
        return "0 s"
    if size < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if size < 1:
        return f"{value * 1e3:.{2 if size < 0.01 else 1}f} ms"
    if size < 60:
        return f"{value:.2f} s"
    minutes, rest = divmod(value, 60)
    return f"{minutes:.0f} min {rest:02.0f} s"


def size(value: int | None) -> str:
    if value is None:
        return ""
    if value < 1024:
        return f"{value} B"
    if value < 1024 * 1024:
        return f"{value / 1024:.1f} KiB"
    return f"{value / 1024 / 1024:.1f} MiB"


def rate(value: float | None, unit: str = "tok/s") -> str:
    return "" if value is None else f"{value:.{2 if value < 10 else 1}f} {unit}"


def local_iso(started: float) -> str:
    """Unix seconds as local ISO 8601 with the offset: 2026-12-02T03:04:05.123+01:00."""
    return datetime.fromtimestamp(started).astimezone().isoformat(timespec="milliseconds")


def compact_time(started: float, now: float) -> str:
    """`14:03:22` today, `12-01 14:03` this year, `2025-12-01` before."""
    when, today = datetime.fromtimestamp(started), datetime.fromtimestamp(now)
    if when.date() == today.date():
        return when.strftime("%H:%M:%S")
    if when.year == today.year:
        return when.strftime("%m-%d %H:%M")
    return when.strftime("%Y-%m-%d")


def _ns(value: float | None) -> int:
    return 0 if value is None else round(value * _NS)


def usage_of(record: dict[str, Any]) -> Usage:
    """The record's stored phases and counts as the `Usage` the rates are defined on."""
    return Usage(
        total_duration=_ns(record.get("total")),
        load_duration=_ns(record.get("load")),
        prompt_eval_count=record.get("prompt_tokens"),
        prompt_eval_duration=_ns(record.get("prefill")),
        eval_count=record.get("eval_tokens") or 0,
        eval_duration=_ns(record.get("decode")),
        prompt_eval_cached_count=record.get("cached_tokens"),
        has_timings=record.get("total") is not None,
    )


def is_cold(record: dict[str, Any]) -> bool:
    return record.get("load") is not None and cold_start(usage_of(record))


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id as `run-n`: the run cut to its shortest prefix unique among these ids' runs
    (at least RUN_MIN characters), the counter without its zeros. Other ids stay whole."""
    runs = {m[1] for i in ids if (m := _ID.match(i))}
    out: dict[str, str] = {}
    for record_id in ids:
        match = _ID.match(record_id)
        if match is None:
            out[record_id] = record_id
            continue
        run = match[1]
        cut = next(
            (n for n in range(RUN_MIN, len(run)) if sum(r.startswith(run[:n]) for r in runs) == 1),
            len(run),
        )
        out[record_id] = f"{run[:cut]}-{int(match[2])}"
    return out


def id_pattern(short: str) -> str | None:
    """The SQL LIKE pattern a short id stands for, None when `short` is not one."""
    match = re.fullmatch(r"([0-9a-f]+)-(\d{1,8})", short)
    if match is None:
        return None
    return f"{match[1]}%-{int(match[2]):08d}"


def find_record(store: Store, given: str) -> dict[str, Any] | str:
    """The record `given` names (a whole id, a short one, or the start of one), else why not."""
    record = store.get(given)
    if record is not None:
        return record
    found = store.ids_like(given.replace("%", "").replace("_", "") + "%")
    pattern = id_pattern(given)
    if not found and pattern:
        found = store.ids_like(pattern)
    if len(found) == 1:
        return store.get(found[0]) or f"no record {given!r}"
    if found:
        return f"{given!r} is more than one record ({', '.join(found[:3])}, …); give more of it"
    return f"no record {given!r}; `ollama-tap records list` shows them"

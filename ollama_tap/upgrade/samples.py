"""The figures `upgrade-check` compares, read from the records store by Ollama version.

Each record carries the version the poller last read from /api/version when its request
arrived (the `ollama_version` column). A side of the comparison is one version's successful
inference exchanges, grouped by model and context class (`measures.ctx_class` of the
prompt plus output tokens, as the decode rate pair's `ctx` label). Per group and figure the
newest `SAMPLE_CAP` values are kept, so memory stays bounded however long the history.

What each figure takes, so that a figure measures one thing:

- `decode_rate`, `prefill_rate`: by Usage's definitions (as `replay send` and the metrics);
- `ttft`: streamed replies without a cold start (a load would dominate it);
- `load`: cold starts only (`measures.cold_start`): a warm reply's load is the scheduler's
  few milliseconds, which say nothing about how fast the new version loads a model.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ollama_tap import ollama
from ollama_tap.measures import COLD_START_NS, ctx_class
from ollama_tap.recorder.store import Filters, Store
from ollama_tap.replay.sending import recorded

FIGURES: Final = ("decode_rate", "prefill_rate", "ttft", "load")
RATES: Final = frozenset({"decode_rate", "prefill_rate"})
"""Figures where more is faster; the others are times, where less is."""
SAMPLE_CAP: Final = 5000
"""Newest values kept per version, model, ctx class and figure."""
PAGE: Final = 1000
_COLUMNS: Final = (
    "seq", "started", "model", "endpoint", "ollama_version", "ttft", "ttfc", "duration",
    "load", "prefill", "decode", "prompt_tokens", "cached_tokens", "eval_tokens", "status",
    "outcome", "done_reason",
)  # fmt: skip
_COLD_S: Final = COLD_START_NS / 1e9

Key = tuple[str, str]
"""(model, ctx class)"""


@dataclass(slots=True)
class Side:
    """One version's figures: per (model, ctx) and figure, the newest values."""

    version: str
    exchanges: int = 0
    first: float | None = None
    last: float | None = None
    values: dict[Key, dict[str, deque[float]]] = field(default_factory=dict)

    def add(self, key: Key, started: float | None, figures: dict[str, float | None]) -> None:
        """Count one exchange and keep the figures it has."""
        self.exchanges += 1
        if started is not None:
            self.first = started if self.first is None else min(self.first, started)
            self.last = started if self.last is None else max(self.last, started)
        group = self.values.setdefault(key, {})
        for name, value in figures.items():
            if value is not None:
                group.setdefault(name, deque(maxlen=SAMPLE_CAP)).append(value)

    def get(self, key: Key, figure: str) -> Sequence[float]:
        return self.values.get(key, {}).get(figure, ())


def key_of(record: dict[str, Any]) -> Key:
    """A record's model and ctx class (prompt plus output tokens)."""
    tokens = (record.get("prompt_tokens") or 0) + (record.get("eval_tokens") or 0)
    return record.get("model") or "", ctx_class(tokens)


def compared(figures: dict[str, Any]) -> dict[str, float | None]:
    """The compared figures of one exchange's (`replay.sending.figures`), None where the
    rules above leave one out."""
    load = figures.get("load")
    cold = load is not None and load > _COLD_S
    return {
        "decode_rate": figures.get("decode_rate"),
        "prefill_rate": figures.get("prefill_rate"),
        "ttft": None if cold else figures.get("ttft"),
        "load": load if cold else None,
    }


def _newest_version(store: Store, filters: Filters, other_than: str | None) -> str | None:
    clauses, params = filters.where()
    clauses.append("ollama_version IS NOT NULL")
    if other_than is not None:
        clauses.append("ollama_version <> ?")
        params.append(other_than)
    rows = store.source.rows(
        f"SELECT ollama_version FROM records WHERE {' AND '.join(clauses)} "
        "ORDER BY seq DESC LIMIT 1",
        params,
    )
    return rows[0]["ollama_version"] if rows else None


def versions(
    store: Store, filters: Filters, before: str | None, after: str | None
) -> tuple[str | None, str | None]:
    """The two versions compared: those named, else the newest recorded version (after) and
    the newest other one (before), which is the last change when versions only go forward."""
    after = after or _newest_version(store, filters, before)
    if before is None and after is not None:
        before = _newest_version(store, filters, after)
    return before, after


def _rows(store: Store, filters: Filters, names: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The successful inference records of these versions, oldest first, a page at a time."""
    clauses, params = filters.where()
    marks = ", ".join("?" * len(names))
    clauses.append(f"ollama_version IN ({marks})")
    clauses.append("outcome = ?")
    params += [*names, "ok"]
    last = 0
    while True:
        rows = store.source.rows(
            f"SELECT {', '.join(_COLUMNS)} FROM records WHERE {' AND '.join(clauses)} "
            f"AND seq > ? ORDER BY seq LIMIT {PAGE}",
            [*params, last],
        )
        for row in rows:
            yield {name: row[name] for name in _COLUMNS}
        if len(rows) < PAGE:
            return
        last = rows[-1]["seq"]


def read_sides(store: Store, filters: Filters, before: str, after: str) -> tuple[Side, Side]:
    """Both versions' figures from the store."""
    sides = {before: Side(before), after: Side(after)}
    for record in _rows(store, filters, [before, after]):
        if record["endpoint"] in ollama.INFERENCE_ENDPOINTS:
            side = sides[record["ollama_version"]]
            side.add(key_of(record), record["started"], compared(recorded(record)))
    return sides[before], sides[after]

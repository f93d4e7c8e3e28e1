"""The figures a benchmark reports, their summaries (min, percentiles, max) and B/A ratios."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ollama_tap.benchmark.request import Sample, Target

STATS: Final = ("min", "p50", "p95", "p99", "max")
COMPARED: Final = ("p50", "p95", "p99")
NEEDS_NEWER_OLLAMA: Final = "n/a (needs newer Ollama)"
_MESSAGES_PER_KIND: Final = 3

Summary = dict[str, Any]
"""{"unit": str, "n": int, "min" | "p50" | "p95" | "p99" | "max": float | None}"""


@dataclass(frozen=True, slots=True)
class Figure:
    """One reported figure: its JSON name, its label in the table, its unit."""

    name: str
    label: str
    unit: str


FIGURES: Final = (
    Figure("ttft", "time to first token", "s"),
    Figure("ttfc", "time to first content", "s"),
    Figure("duration", "request duration", "s"),
    Figure("decode_rate", "decode rate (Ollama)", "tokens/s"),
    Figure("output_rate", "observed output rate", "events/s"),
    Figure("prefill_rate", "prefill rate", "tokens/s"),
    Figure("load", "load time", "s"),
    Figure("queue_wait", "queue wait", "s"),
    Figure("server_ttft", "server TTFT", "s"),
    Figure("client_overhead", "client overhead", "s"),
)


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `ordered` is sorted."""
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(values: Sequence[float], unit: str) -> Summary:
    ordered = sorted(values)
    if not ordered:
        return {"unit": unit, "n": 0, **dict.fromkeys(STATS)}
    return {
        "unit": unit,
        "n": len(ordered),
        "min": ordered[0],
        "p50": quantile(ordered, 0.50),
        "p95": quantile(ordered, 0.95),
        "p99": quantile(ordered, 0.99),
        "max": ordered[-1],
    }


@dataclass(slots=True)
class Result:
    """Every request against one target: the counted ones, and the warm-up's apart."""

    target: Target
    samples: list[Sample] = field(default_factory=list)
    warmup: list[Sample] = field(default_factory=list)

    def warmup_errors(self) -> dict[str, int]:
        """Failed warm-up requests by kind: not counted, but never hidden (a warm-up that
        failed to load the model changes what the counted requests measure)."""
        return _errors(self.warmup)

    def warmup_error_messages(self) -> dict[str, list[str]]:
        return _messages(self.warmup)

    @property
    def ok(self) -> int:
        return sum(s.ok for s in self.samples)

    def errors(self) -> dict[str, int]:
        return _errors(self.samples)

    def error_messages(self) -> dict[str, list[str]]:
        return _messages(self.samples)

    def figures(self) -> dict[str, Summary]:
        """A summary of every figure over the successful requests (n = 0 when none)."""
        ok = [s for s in self.samples if s.ok]
        return {
            f.name: summarize([s.values[f.name] for s in ok if f.name in s.values], f.unit)
            for f in FIGURES
        }

    def notes(self) -> dict[str, str]:
        """Why a figure is missing, where the reason is known."""
        ok = [s for s in self.samples if s.ok]
        if ok and not any(s.cached_reported for s in ok):
            return {"prefill_rate": NEEDS_NEWER_OLLAMA}
        return {}


def _errors(samples: list[Sample]) -> dict[str, int]:
    return dict(Counter(s.kind for s in samples if not s.ok))


def _messages(samples: list[Sample]) -> dict[str, list[str]]:
    """The first few distinct messages of each error kind."""
    out: dict[str, list[str]] = {}
    for s in samples:
        if s.ok:
            continue
        seen = out.setdefault(s.kind, [])
        if s.message and s.message not in seen and len(seen) < _MESSAGES_PER_KIND:
            seen.append(s.message)
    return out


Comparison = dict[str, dict[str, float | None]]
"""{figure name: {"p50" | "p95" | "p99": float | None}}"""


def compare(a: dict[str, Summary], b: dict[str, Summary]) -> tuple[Comparison, Comparison]:
    """B/A ratios and B − A differences of p50, p95 and p99 per figure (None when undefined)."""
    ratios: Comparison = {}
    deltas: Comparison = {}
    for f in FIGURES:
        x, y = a[f.name], b[f.name]
        ratios[f.name] = {stat: _ratio(x[stat], y[stat]) for stat in COMPARED}
        deltas[f.name] = {stat: _delta(x[stat], y[stat]) for stat in COMPARED}
    return ratios, deltas


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None


def _delta(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None else None

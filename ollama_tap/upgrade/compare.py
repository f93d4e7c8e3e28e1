"""Two sides compared: per model, ctx class and figure, p50 and p95 with the number of
exchanges behind each, the ratio after/before, and a verdict per model.

The verdict reads the p50s: a figure is slower when its median moved the wrong way by more
than the threshold (a rate fell below `1 - threshold` of before, a time rose above
`1 + threshold`), faster when it moved the right way by as much; a time must also have
moved by more than `TIME_FLOOR`, since a client's clock and the loop add a few milliseconds
of jitter that a 5 ms TTFT would read as 50 %. Only figures with at
least `min_samples` exchanges on each side count; a model with none says so instead of a
verdict. A model is slower when any counted figure is, whatever the others did (one
regression is what an upgrade check exists to catch), else faster when any is, else same.

The `--json` document (version 1)::

    {"version": 1, "before": side, "after": side,
     "threshold": float, "min_samples": int,
     "models": [{"model": str, "verdict": "slower" | "same" | "faster" | "too_few_samples",
                 "worst": row | null,
                 "rows": [{"ctx": str, "figure": str, "unit": str,
                           "before": {"n": int, "p50": float | null, "p95": float | null},
                           "after": {...}, "ratio": float | null, "counted": bool,
                           "change": "slower" | "same" | "faster" | null,
                           "judged": float | null}]}],
     "failed": bool}
    side := {"version": str, "source": str, "exchanges": int,
             "first": float | null, "last": float | null}

`ratio` is after's p50 over before's; `judged` the slowdown the verdict read (a fraction,
negative when faster, 0 for a time under `TIME_FLOOR`; null when not counted); `worst` is
the counted row that moved most the slow way; `failed` is true when a model is slower
(the command then exits 1).
"""

from __future__ import annotations

from typing import Any, Final

from ollama_tap.benchmark.figures import summarize
from ollama_tap.upgrade.samples import FIGURES, RATES, Key, Side

UNITS: Final = {"decode_rate": "tokens/s", "prefill_rate": "tokens/s", "ttft": "s", "load": "s"}
VERDICTS: Final = ("slower", "same", "faster", "too_few_samples")
TIME_FLOOR: Final = 0.02
"""Seconds a time's p50 must move by, beyond the threshold, to be slower or faster."""


def _stats(values: Any) -> dict[str, Any]:
    summary = summarize(list(values), "")
    return {"n": summary["n"], "p50": summary["p50"], "p95": summary["p95"]}


def slowdown(figure: str, ratio: float) -> float:
    """How much slower a ratio after/before is, as a fraction (negative: faster)."""
    return 1.0 - ratio if figure in RATES else ratio - 1.0


def _row(key: Key, figure: str, before: Side, after: Side, threshold: float, least: int) -> Any:
    then, now = _stats(before.get(key, figure)), _stats(after.get(key, figure))
    ratio = now["p50"] / then["p50"] if then["p50"] and now["p50"] is not None else None
    counted = then["n"] >= least and now["n"] >= least and ratio is not None
    change, judged = None, None
    if counted and ratio is not None:
        judged = slowdown(figure, ratio)
        if figure not in RATES and abs(now["p50"] - then["p50"]) <= TIME_FLOOR:
            judged = 0.0
        change = "slower" if judged > threshold else "faster" if judged < -threshold else "same"
    return {
        "ctx": key[1], "figure": figure, "unit": UNITS[figure], "before": then,
        "after": now, "ratio": ratio, "counted": counted, "change": change, "judged": judged,
    }  # fmt: skip


def _verdict(rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    counted = [r for r in rows if r["counted"]]
    if not counted:
        return "too_few_samples", None
    worst = max(counted, key=lambda r: r["judged"])
    changes = {r["change"] for r in counted}
    for verdict in ("slower", "faster"):
        if verdict in changes:
            return verdict, worst
    return "same", worst


def _side(side: Side, source: str) -> dict[str, Any]:
    return {
        "version": side.version, "source": source, "exchanges": side.exchanges,
        "first": side.first, "last": side.last,
    }  # fmt: skip


def compare(
    before: Side,
    after: Side,
    threshold: float,
    min_samples: int,
    sources: tuple[str, str] = ("recorded", "recorded"),
) -> dict[str, Any]:
    """The document above, models and ctx classes in name order."""
    keys = sorted(before.values.keys() | after.values.keys())
    models: dict[str, list[dict[str, Any]]] = {}
    for key in keys:
        for figure in FIGURES:
            if before.get(key, figure) or after.get(key, figure):
                models.setdefault(key[0], []).append(
                    _row(key, figure, before, after, threshold, min_samples)
                )
    out = []
    for model, rows in models.items():
        verdict, worst = _verdict(rows)
        out.append({"model": model, "verdict": verdict, "worst": worst, "rows": rows})
    return {
        "version": 1,
        "before": _side(before, sources[0]),
        "after": _side(after, sources[1]),
        "threshold": threshold,
        "min_samples": min_samples,
        "models": out,
        "failed": any(m["verdict"] == "slower" for m in out),
    }

"""`replay send`'s report: per request and aggregate, recorded vs now, as JSON or rich tables.

The `--json` document (version 1)::

    {"version": 1, "to": str, "sent": int, "skipped": [{"id": str, "reason": str}],
     "requests": [{"id": str, "method": str, "endpoint": str, "model": str | null,
                   "recorded": {figure: float | null, "status": int | null,
                                "outcome": str, "done_reason": str | null},
                   "now": {... as recorded, and "error": str | null},
                   "ratios": {figure: float | null}}],
     "aggregate": {figure: {"unit": str,
                            "recorded": {"n": int, "p50": float | null, "p95": ...},
                            "now": {"n": int, "p50": ..., "p95": ...},
                            "ratio": {"p50": float | null, "p95": ...}}},
     "changed": {"status": int, "outcome": int, "done_reason": int},
     "thresholds": [{"rule": str, "ratio": float | null, "failed": bool}],
     "failed": bool}

Figures: ttft, ttfc, duration, load (seconds), decode_rate, prefill_rate (tokens/s),
output_tokens. A ratio is now over recorded; the aggregate takes each side over the
requests that have the figure on both sides, so a ratio compares like with like.
"""

from __future__ import annotations

from typing import Any, Final

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ollama_tap.benchmark.figures import summarize
from ollama_tap.replay.thresholds import FIGURES, STATS, Rule

UNITS: Final = {
    "ttft": "s", "ttfc": "s", "duration": "s", "load": "s",
    "decode_rate": "tokens/s", "prefill_rate": "tokens/s", "output_tokens": "tokens",
}  # fmt: skip
_CHANGED: Final = ("status", "outcome", "done_reason")


def _ratio(now: float | None, then: float | None) -> float | None:
    return None if now is None or not then else now / then


def _side(values: list[float], unit: str) -> dict[str, Any]:
    summary = summarize(values, unit)
    return {"n": summary["n"], **{s: summary[s] for s in STATS}}


def aggregate(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FIGURES:
        both = [(p["recorded"][name], p["now"][name]) for p in pairs
                if p["recorded"][name] is not None and p["now"][name] is not None]  # fmt: skip
        then = _side([a for a, _ in both], UNITS[name])
        now = _side([b for _, b in both], UNITS[name])
        out[name] = {
            "unit": UNITS[name],
            "recorded": then,
            "now": now,
            "ratio": {s: _ratio(now[s], then[s]) for s in STATS},
        }
    return out


def document(
    to: str,
    records: list[dict[str, Any]],
    pairs: list[dict[str, Any]],
    skipped: list[dict[str, str]],
    rules: list[Rule],
) -> dict[str, Any]:
    requests = [
        {
            "id": r["id"], "method": r["method"], "endpoint": r["endpoint"], "model": r["model"],
            **pair,
            "ratios": {n: _ratio(pair["now"][n], pair["recorded"][n]) for n in FIGURES},
        }
        for r, pair in zip(records, pairs, strict=True)
    ]  # fmt: skip
    agg = aggregate(pairs)
    checks = [rule.check(agg) for rule in rules]
    changed = {k: sum(p["recorded"][k] != p["now"][k] for p in pairs) for k in _CHANGED}
    return {
        "version": 1,
        "to": to,
        "sent": len(pairs),
        "skipped": skipped,
        "requests": requests,
        "aggregate": agg,
        "changed": changed,
        "thresholds": checks,
        "failed": any(c["failed"] for c in checks),
    }


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "s":
        return f"{value * 1000:.1f} ms"
    return f"{value:.1f}" if unit == "tokens/s" else f"{value:.0f}"


def _times(value: float | None) -> str:
    return "–" if value is None else f"×{value:.2f}"


def render(console: Console, doc: dict[str, Any]) -> None:
    """The per-request table, the aggregate table and the threshold verdicts."""
    per = Table(title=f"{doc['sent']} requests re-sent to {doc['to']}", box=box.SIMPLE_HEAD)
    # The id is what `records show` takes, and the endpoint says what was sent: never cut.
    least = {k: max((len(r[k]) for r in doc["requests"]), default=2) for k in ("id", "endpoint")}
    for name in ("id", "endpoint", "model", "status", "ttft", "decode rate", "tokens",
                 "done_reason"):  # fmt: skip
        per.add_column(name, no_wrap=True, overflow="ellipsis", min_width=least.get(name))
    for r in doc["requests"]:
        then, now = r["recorded"], r["now"]
        cells = (
            r["id"], r["endpoint"], r["model"] or "",
            f"{then['status']} → {now['status']}",
            f"{_num(then['ttft'], 's')} → {_num(now['ttft'], 's')}",
            f"{_num(then['decode_rate'], 'tokens/s')} → {_num(now['decode_rate'], 'tokens/s')}",
            f"{_num(then['output_tokens'], 'tokens')} → {_num(now['output_tokens'], 'tokens')}",
            f"{then['done_reason'] or then['outcome']} → {now['done_reason'] or now['outcome']}",
        )  # fmt: skip
        per.add_row(*(Text(str(c)) for c in cells))
    console.print(per)
    agg = Table(title="recorded vs now", box=box.SIMPLE_HEAD)
    for name in ("figure", "n", "p50 recorded", "p50 now", "ratio", "p95 recorded", "p95 now",
                 "ratio "):  # fmt: skip
        agg.add_column(name, justify="left" if name == "figure" else "right")
    for name, a in doc["aggregate"].items():
        unit = a["unit"]
        row: list[str] = [name, str(a["now"]["n"])]
        for stat in STATS:
            row += [_num(a["recorded"][stat], unit), _num(a["now"][stat], unit)]
            row.append(_times(a["ratio"][stat]))
        agg.add_row(*row)
    console.print(agg)
    for r in doc["requests"]:
        if r["now"]["error"]:
            console.print(Text(f"{r['id']}: {r['now']['error']}"), style="red")
    for s in doc["skipped"]:
        console.print(Text(f"skipped {s['id']}: {s['reason']}"), style="dim")
    for check in doc["thresholds"]:
        verdict = "FAILED" if check["failed"] else "ok"
        console.print(Text(f"--fail-if {check['rule']}: ratio {_times(check['ratio'])} {verdict}"))

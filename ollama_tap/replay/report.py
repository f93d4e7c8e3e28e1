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

import io
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


def _width(renderable: Any) -> int:
    """The columns `renderable` takes when nothing limits it."""
    probe = Console(width=10_000, record=True, file=io.StringIO())
    probe.print(renderable)
    return max((len(line) for line in probe.export_text().splitlines()), default=0)


def render(console: Console, doc: dict[str, Any], wide: bool = False) -> None:
    """The summary (the aggregate table and the threshold verdicts), fitted to the
    terminal; the per-request table before it only when it fits too, or `wide`: a table
    whose ids and figures are cut is worse than none (`--json` has every figure)."""
    console.print(Text(f"{doc['sent']} requests re-sent to {doc['to']}", style="bold"))
    per = _per_request(doc)
    needs = _width(per)
    if wide or needs <= console.width:
        # A console of the table's own width: rich lays any table out to its console's.
        Console(file=console.file, width=max(needs, console.width)).print(per)
    else:
        console.print(Text(
            f"(per-request table: {needs} columns; --wide prints it, --json has every figure)",
            style="dim",
        ))  # fmt: skip
    agg = _aggregate(doc, full=True)
    if not wide and _width(agg) > console.width:
        agg = _aggregate(doc, full=False)
    Console(file=console.file, width=max(_width(agg), console.width)).print(agg)
    _notes(console, doc)


def _per_request(doc: dict[str, Any]) -> Table:
    per = Table(box=box.SIMPLE_HEAD)
    for name in ("id", "endpoint", "model", "status", "ttft", "decode rate", "tokens",
                 "done_reason"):  # fmt: skip
        per.add_column(name, no_wrap=True)
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
    return per


def _aggregate(doc: dict[str, Any], full: bool) -> Table:
    """Recorded vs now per figure; not `full`, the p95 values go and their ratio stays."""
    agg = Table(title="recorded vs now", box=box.SIMPLE_HEAD)
    names = ["figure", "n", "p50 recorded", "p50 now", "ratio"]
    names += ["p95 recorded", "p95 now", "ratio "] if full else ["p95 ratio"]
    for name in names:
        agg.add_column(name, justify="left" if name == "figure" else "right", no_wrap=True)
    for name, a in doc["aggregate"].items():
        unit = a["unit"]
        row: list[str] = [name, str(a["now"]["n"])]
        for stat in STATS:
            if full or stat == "p50":
                row += [_num(a["recorded"][stat], unit), _num(a["now"][stat], unit)]
            row.append(_times(a["ratio"][stat]))
        agg.add_row(*row)
    return agg


def _notes(console: Console, doc: dict[str, Any]) -> None:
    for r in doc["requests"]:
        if r["now"]["error"]:
            console.print(Text(f"{r['id']}: {r['now']['error']}"), style="red")
    for s in doc["skipped"]:
        console.print(Text(f"skipped {s['id']}: {s['reason']}"), style="dim")
    for check in doc["thresholds"]:
        verdict = "FAILED" if check["failed"] else "ok"
        console.print(Text(f"--fail-if {check['rule']}: ratio {_times(check['ratio'])} {verdict}"))

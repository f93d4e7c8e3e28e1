"""The benchmark's two outputs: the versioned JSON document and the rich tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ollama_tap.benchmark.figures import COMPARED, FIGURES, STATS, Figure, Result, Summary, compare
from ollama_tap.benchmark.runner import Workload

VERSION: Final = 1
_LABELS: Final = "AB"
_LABEL_OF: Final = {f.name: f.label for f in FIGURES}


def document(
    results: Sequence[Result], workload: Workload, interrupted: bool = False
) -> dict[str, Any]:
    """The `--json` document; its shape is documented in docs/bench.md and stays stable."""
    figures = [r.figures() for r in results]
    ratios, deltas = compare(figures[0], figures[1]) if len(results) == 2 else (None, None)
    return {
        "version": VERSION,
        "interrupted": interrupted,
        "api": results[0].target.api,
        "workload": {
            "requests": workload.requests,
            "concurrency": workload.concurrency,
            "warmup": workload.warmup,
            "prompts": len(workload.prompts),
        },
        "targets": [_target(_LABELS[i], r, figures[i]) for i, r in enumerate(results)],
        "ratios": ratios,
        "deltas": deltas,
    }


def _target(label: str, result: Result, figures: dict[str, Summary]) -> dict[str, Any]:
    return {
        "label": label,
        "url": str(result.target.url),
        "model": result.target.model,
        "requests": len(result.samples),
        "ok": result.ok,
        "errors": result.errors(),
        "error_messages": result.error_messages(),
        "warmup_errors": result.warmup_errors(),
        "warmup_error_messages": result.warmup_error_messages(),
        "figures": figures,
        "notes": result.notes(),
    }


def render(console: Console, doc: dict[str, Any]) -> None:
    """Print one table per target, the errors by kind, and the B/A table when compared."""
    console.print(Text(_heading(doc)))
    if doc["interrupted"]:
        console.print(Text("interrupted: the figures cover the requests that ended before it"))
    for target in doc["targets"]:
        for kind, count in sorted(target["warmup_errors"].items()):
            first = target["warmup_error_messages"].get(kind, [])
            console.print(
                Text(
                    f"{target['label']}: warm-up (not counted): {count} {kind}"
                    + (f" — {first[0]}" if first else "")
                )
            )
        if target["ok"]:
            console.print(_figures_table(target))
        else:
            console.print(Text(_title(target)))
        for name, note in target["notes"].items():
            console.print(Text(f"{target['label']}: {_LABEL_OF[name]}: {note}"))
        if target["errors"]:
            console.print(_errors_table(target))
    if doc["ratios"] is not None:
        console.print(_compare_table(doc))


def _heading(doc: dict[str, Any]) -> str:
    w = doc["workload"]
    return (
        f"/api/{doc['api']} · {w['requests']} requests per URL · concurrency "
        f"{w['concurrency']} · warm-up {w['warmup']} · {w['prompts']} prompt(s)"
    )


def _title(target: dict[str, Any]) -> str:
    failed = target["requests"] - target["ok"]
    return (
        f"{target['label']}: {target['model']} at {target['url']} — "
        f"{target['ok']} ok, {failed} failed"
    )


def _figures_table(target: dict[str, Any]) -> Table:
    table = Table(title=Text(_title(target)), title_justify="left")
    _label_columns(table)
    table.add_column("n", justify="right", no_wrap=True)
    for stat in STATS:
        table.add_column(stat, justify="right", no_wrap=True)
    for f in FIGURES:
        summary = target["figures"][f.name]
        if summary["n"]:
            shown = [_number(summary[stat], f) for stat in STATS]
        else:
            # The reason, when known, is printed below the table: a cell would cut it off.
            shown = ["n/a" if f.name in target["notes"] else "–", *[""] * (len(STATS) - 1)]
        table.add_row(f.label, _unit(f), str(summary["n"]), *shown)
    return table


def _errors_table(target: dict[str, Any]) -> Table:
    table = Table(title=Text(f"{target['label']}: errors by kind"), title_justify="left")
    table.add_column("kind")
    table.add_column("requests", justify="right")
    table.add_column("messages (first distinct ones)")
    for kind, count in sorted(target["errors"].items()):
        # Text cells: messages come from the server and are never read as rich markup.
        messages = Text("\n".join(target["error_messages"].get(kind, [])))
        table.add_row(kind, str(count), messages)
    return table


def _compare_table(doc: dict[str, Any]) -> Table:
    a, b = (t["figures"] for t in doc["targets"])
    table = Table(title="B / A (B: the second URL)", title_justify="left")
    _label_columns(table)
    for name in ("A\np50", "B\np50", *(f"B/A\n{stat}" for stat in COMPARED), "B − A\np50"):
        table.add_column(name, justify="right", no_wrap=True)
    for f in FIGURES:
        ratios, deltas = doc["ratios"][f.name], doc["deltas"][f.name]
        table.add_row(
            f.label,
            _unit(f),
            _number(a[f.name]["p50"], f),
            _number(b[f.name]["p50"], f),
            *(_ratio(ratios[stat]) for stat in COMPARED),
            _number(deltas["p50"], f, signed=True),
        )
    return table


def _label_columns(table: Table) -> None:
    # On a narrow terminal the figure's name wraps and the numbers keep every digit (rich
    # would otherwise cut the numbers short with an ellipsis).
    table.add_column("figure", min_width=12)
    table.add_column("unit", no_wrap=True)


def _unit(f: Figure) -> str:
    # Seconds are shown as ms: most figures here are well under a second.
    return "ms" if f.unit == "s" else f.unit


def _number(value: float | None, f: Figure, signed: bool = False) -> str:
    """Three significant digits or more, as narrow as that allows (the tables fit 80
    columns): 0.76, 12.3, 999, 73.0k, 1.20M."""
    if value is None:
        return "–"
    sign = "+" if signed else ""
    shown = value * 1e3 if f.unit == "s" else value
    size = abs(shown)
    if size >= 999_500:
        return f"{shown / 1e6:{sign}.2f}M"
    if size >= 9_995:
        return f"{shown / 1e3:{sign}.1f}k"
    if size >= 99.95:
        return f"{shown:{sign}.0f}"
    return f"{shown:{sign}.1f}" if size >= 9.995 else f"{shown:{sign}.2f}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"

"""`ollama-tap upgrade-check`: the recorded figures before and after an Ollama version
change, per model and context class, with a verdict per model (docs/upgrades.md).

Exit 0 (no model slower), 1 (a model slower beyond the threshold), 2 (nothing to compare:
no version recorded, or one only; a bad option).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from typing import Any, Final, TextIO

import orjson

from ollama_tap.cli.options import add_db_option, fail, resending, store_from
from ollama_tap.config import ConfigError, parse_ollama_host
from ollama_tap.recorder.backend import StoreError
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters, Store, parse_time
from ollama_tap.terminal import printable
from ollama_tap.upgrade.against import against, sample
from ollama_tap.upgrade.compare import compare, slowdown
from ollama_tap.upgrade.samples import RATES, read_sides, versions

NAME: Final = "upgrade-check"
_LABELS: Final = {"decode_rate": "decode", "prefill_rate": "prefill", "ttft": "TTFT",
                  "load": "load"}  # fmt: skip
_VERDICT: Final = {"slower": "SLOWER", "same": "same", "faster": "faster"}


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(model=args.model, instance=args.instance, since=args.since, until=args.until)


def _value(figure: str, value: float | None) -> str:
    """Short enough that a p50 / p95 pair fits its column whatever the size."""
    if value is None:
        return "–"
    if figure in RATES:
        return f"{value:.{1 if value < 1000 else 0}f}"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.{2 if value < 10 else 1 if value < 100 else 0}f} s"


def _pair(figure: str, stats: dict[str, Any]) -> str:
    return f"{_value(figure, stats['p50'])} / {_value(figure, stats['p95'])}"


def _change(row: dict[str, Any]) -> str:
    if row["ratio"] is None:
        return "–"
    slow = slowdown(row["figure"], row["ratio"])
    word = "slower" if slow > 0 else "faster"
    return f"{abs(slow):.0%} {word}" if round(abs(slow), 2) else "="


def _when(at: float | None) -> str:
    return "–" if at is None else datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M")


def _side(label: str, side: dict[str, Any]) -> str:
    line = f"  {label + ':':<7} {side['exchanges']} exchanges {side['source']}"
    if side["source"] != "recorded":
        return line
    return f"{line}, {_when(side['first'])} to {_when(side['last'])}"


def _headline(model: dict[str, Any], least: int) -> str:
    verdict = model["verdict"]
    if verdict == "too_few_samples":
        most = max((min(r["before"]["n"], r["after"]["n"]) for r in model["rows"]), default=0)
        return f"too few samples (at most {most} a side, --min-samples {least})"
    # The figure behind the verdict: the one that moved most the slow way when slower,
    # the fast way when faster, and either way when the same.
    row = model["worst"]
    counted = [r for r in model["rows"] if r["counted"]]
    if verdict == "faster":
        row = min(counted, key=lambda r: r["judged"])
    elif verdict == "same":
        row = max(counted, key=lambda r: abs(r["judged"]))
    if not round(row["judged"], 2):
        return f"{_VERDICT[verdict]} (no figure moved)"
    return f"{_VERDICT[verdict]} ({_LABELS[row['figure']]} {_change(row)} at {row['ctx']})"


def render(doc: dict[str, Any], out: TextIO) -> None:
    """The comparison in lines of at most 80 columns (a model name longer than the
    line leaves its own headline longer, never cut: it is what the user types)."""
    before, after = doc["before"], doc["after"]
    lines = [
        f"Ollama {before['version']} → {after['version']}",
        _side("before", before),
        _side("after", after),
        f"  slower or faster: a p50 moved over {doc['threshold']:.0%}, "
        f"on at least {doc['min_samples']} exchanges a side",
    ]
    head = f"  {'ctx':<6} {'figure':<8} {'n':>5} {'before p50 / p95':>18} {'n':>5} "
    head += f"{'after p50 / p95':>18}  {'change':>10}"
    for model in doc["models"]:
        name = model["model"] or "(no model)"
        lines += ["", f"{name}: {_headline(model, doc['min_samples'])}", head]
        for r in model["rows"]:
            mark = _change(r) if r["counted"] else "(few)"
            lines.append(
                f"  {r['ctx']:<6} {_LABELS[r['figure']]:<8} {r['before']['n']:>5} "
                f"{_pair(r['figure'], r['before']):>18} {r['after']['n']:>5} "
                f"{_pair(r['figure'], r['after']):>18}  {mark:>10}"
            )
    if "against" in doc:
        sent = doc["against"]
        lines += ["", f"{sent['sent']} requests re-sent to {sent['url']}, {sent['failed']} failed"]
        lines += [f"  {e['count']} × {e['error']}"[:80] for e in sent["errors"]]
    if not doc["models"]:
        lines += ["", "No successful inference exchange was recorded under either version."]
    units = "rates in tokens/s; n: exchanges behind each figure"
    lines += ["", units]
    for line in lines:
        out.write(printable(line, out) + "\n")


def cmd_upgrade_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    if not 0 < args.threshold < 1:
        return fail(NAME, "--threshold is a fraction between 0 and 1, e.g. 0.1") + 1
    if args.min_samples < 1:
        return fail(NAME, "--min-samples must be at least 1") + 1
    store = store_from(args)
    filters = _filters(args)
    try:
        if args.against is not None:
            made = _against(args, store, filters)
            if isinstance(made, str):
                return fail(NAME, made) + 1
            doc = made
        else:
            before, after = versions(store, filters, args.before, args.after)
            if before is None or after is None or before == after:
                return fail(NAME, _nothing(before, after)) + 1
            doc = compare(*read_sides(store, filters, before, after), args.threshold,
                          args.min_samples)  # fmt: skip
    except (SchemaError, StoreError) as exc:
        return fail(NAME, exc) + 1
    stream = out or sys.stdout
    if args.json:
        stream.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(doc, stream)
    return 1 if doc["failed"] else 0


def _against(args: argparse.Namespace, store: Store, filters: Filters) -> dict[str, Any] | str:
    """The comparison with the replies of --against, or why there is none."""
    try:
        to = parse_ollama_host(args.against)
    except ConfigError as exc:
        return str(exc)
    if args.after is not None:
        return "--to is the version --against answers with: give one or the other"
    if args.limit < 1:
        return "--limit must be at least 1"
    version = args.before or versions(store, filters, None, None)[1]
    records, skipped = sample(store, filters, version, args.limit)
    if not records:
        why = "; ".join(f"{n} {reason}" for reason, n in skipped.most_common(3))
        under = f" served by Ollama {version}" if version else ""
        return f"no recorded request{under} can be re-sent" + (f" ({why})" if why else "")
    settings = (args.threshold, args.min_samples, args.concurrency)
    with resending(len(records), not args.json) as tick:
        return asyncio.run(against(to, records, version, settings, tick))


def _nothing(before: str | None, after: str | None) -> str:
    if after is None:
        return (
            "no record carries an Ollama version (records made by `ollama-tap serve` "
            "since it records versions do; or name them with --from and --to)"
        )
    if before is None or before == after:
        return (
            f"every record was served by Ollama {after}: nothing to compare until another "
            "version has served some (or name two with --from and --to)"
        )
    return "nothing to compare"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        NAME,
        help="compare the recorded figures before and after an Ollama version change",
        description="Per model and context class, the recorded decode rate, prefill rate, "
        "TTFT and load time under two Ollama versions (the last change by default), with "
        "a verdict per model. Exit 1 when a model is slower beyond --threshold.",
    )
    add_db_option(p)
    p.add_argument(
        "--from",
        dest="before",
        metavar="V1",
        help="the version before [default: the newest recorded other than --to]",
    )
    p.add_argument("--to", dest="after", metavar="V2",
                   help="the version after [default: the newest recorded other than "
                   "--from]")  # fmt: skip
    p.add_argument("--threshold", type=float, default=0.1,
                   help="a p50 moved by more than this fraction is slower or faster "
                   "[default: 0.1]")  # fmt: skip
    p.add_argument("--min-samples", type=int, default=20,
                   help="exchanges a side a figure needs to count [default: 20]")  # fmt: skip
    p.add_argument("--model", help="only this model (any spelling Ollama accepts)")
    p.add_argument("--instance", help="only records made by this tap (its --instance)")
    p.add_argument("--since", type=parse_time, help="from this time (unix seconds or ISO 8601)")
    p.add_argument("--until", type=parse_time, help="before this time")
    p.add_argument("--against", metavar="URL",
                   help="re-send a sample of the recorded traffic (of --from, else the newest "
                   "version) to this Ollama and compare its replies, e.g. "
                   "http://127.0.0.1:11500")  # fmt: skip
    p.add_argument("--limit", type=int, default=100,
                   help="with --against: the newest N requests [default: 100]")  # fmt: skip
    p.add_argument("--concurrency", type=int, default=1,
                   help="with --against: requests in flight [default: 1]")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document (docs/upgrades.md)")
    p.set_defaults(func=cmd_upgrade_check)

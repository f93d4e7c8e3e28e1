"""`ollama-tap context`: per model and client over a window, the share of prompts that did not
fit, the `num_ctx` that would have held them, and its KV cache memory (docs/diagnoses.md,
"Advice").

Reads the recordings database directly, like `records` (--db, no token), and asks Ollama
(--url) for /api/ps and /api/show to size the cache; without an answer it still prints the
tallies and says why the memory columns are empty.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
import time
from typing import Any, Final

import aiohttp
import orjson

from ollama_tap.advice.report import CACHE_TYPE, Upstream, advise, human_bytes
from ollama_tap.advice.upstream import read_upstream
from ollama_tap.advice.window import tally
from ollama_tap.cli.figures import local_iso
from ollama_tap.cli.listing import Column, table_lines, width_wanted
from ollama_tap.cli.options import add_db_option, add_time_options, store_from
from ollama_tap.cli.records import guarded
from ollama_tap.config import DEFAULT_UPSTREAM, ConfigError, resolve_upstream
from ollama_tap.recorder.store import Filters
from ollama_tap.terminal import plural, printable

DEFAULT_SINCE: Final = 86_400.0
"""The window when --since is not given: the last day."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `context` to the CLI's subparsers."""
    p = sub.add_parser(
        "context",
        help="per model and client: prompts cut, the num_ctx that would hold them, its memory",
    )
    add_db_option(p)
    add_time_options(p)
    p.add_argument("--model", help="only this model (any spelling Ollama accepts)")
    p.add_argument("--client", help="only this client name, e.g. open-webui")
    p.add_argument(
        "--url",
        default=os.environ.get("OLLAMA_TAP_UPSTREAM"),
        help=f"Ollama's URL for /api/ps and /api/show, to estimate memory (default: "
        f"$OLLAMA_TAP_UPSTREAM, else $OLLAMA_HOST, else {DEFAULT_UPSTREAM})",
    )
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.set_defaults(func=guarded(run_context, "context"))


def _share(doc: dict[str, Any]) -> str:
    return f"{doc['cut']} ({doc['cut_share']:.0%})" if doc["cut"] else "0"


def _needs(doc: dict[str, Any]) -> str:
    if doc["num_ctx"] is None:
        return "-"
    return ("" if doc["needed_exact"] else "≥") + str(doc["num_ctx"])


def _kv(doc: dict[str, Any]) -> str:
    if doc["kv_bytes"] is None:
        return "-"
    return ("≤" if doc["kv_upper_bound"] else "") + human_bytes(doc["kv_bytes"])


def _more(doc: dict[str, Any]) -> str:
    if doc["kv_bytes"] is None or doc["kv_bytes_now"] is None:
        return "-"
    more = doc["kv_bytes"] - doc["kv_bytes_now"]
    return ("+" if more >= 0 else "") + human_bytes(more)


COLUMNS: Final = (
    Column("model", lambda d: d["model"], keep=100, cap=18),
    Column("client", lambda d: d["client"] or "-", keep=90, cap=12),
    Column("requests", lambda d: str(d["requests"]), right=True, keep=70),
    Column("cut", _share, right=True, keep=100),
    Column("shifted", lambda d: str(d["overflowed"]), right=True, keep=20),
    Column("num_ctx", lambda d: str(d["context"] or "-"), right=True, keep=85),
    Column("needs", _needs, right=True, keep=100),
    Column("kv cache", _kv, right=True, keep=88),
    Column("more", _more, right=True, keep=60),
)
"""By the rules of `records list`: at 80 columns the decoration goes first (the shifted
replies, then what the cache adds), while which model, which app, the share cut, the
context it has, the context it needs and its cache stay whole."""
LEGEND: Final = (
    f"needs: the largest prompt + output seen, rounded up to a multiple of 256 (llama.cpp "
    f"pads every slot so); ≥ where a cut prompt's length is unknown. kv cache: {CACHE_TYPE} "
    "K and V at that context for one slot (× OLLAMA_NUM_PARALLEL; ≤ with sliding-window "
    "layers); more: against the num_ctx the model has now."
)


def _window(args: argparse.Namespace) -> Filters:
    since = args.since if args.since is not None else time.time() - DEFAULT_SINCE
    return Filters(model=args.model, client=args.client, since=since, until=args.until)


async def _upstream(url: str | None, models: list[str]) -> Upstream:
    try:
        base = resolve_upstream(url, os.environ.get("OLLAMA_HOST"))
    except ConfigError as exc:
        return Upstream({}, {}, f"{exc}: no memory estimates")
    async with aiohttp.ClientSession(trust_env=False) as session:
        return await read_upstream(session, base, models)


def run_context(args: argparse.Namespace) -> int:
    window = _window(args)
    tallies = tally(store_from(args), window)
    upstream = asyncio.run(_upstream(args.url, [t.model for t in tallies]))
    docs = advise(tallies, upstream)
    if upstream.problem:
        print(f"ollama-tap context: {upstream.problem}", file=sys.stderr)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(docs) + b"\n")
        return 0
    if not docs:
        print("no generation or embedding request in the window (--since, --model, --client)")
        return 0
    width = width_wanted(sys.stdout)
    wrap = width or 100  # piped: the table whole, the prose still in lines
    lines = [
        f"{plural(len(docs), 'model and client pair')} since {local_iso(window.since or 0)[:16]}",
        *table_lines(docs, COLUMNS, width),
        "",
        *textwrap.wrap(LEGEND, wrap),
    ]
    advised = [d for d in docs if d["cut"] or d["overflowed"]]
    if advised:
        lines.append("")
    for d in advised:
        said = printable(f"{d['model']} ({d['client'] or 'no client name'}): {d['advice']}")
        lines += textwrap.wrap(said, wrap, subsequent_indent="  ", break_long_words=False)
    print("\n".join(lines))
    return 0

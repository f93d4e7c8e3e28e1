"""`ollama-tap loads`: the proxy's recent model load events (its /_tap/api/loads), as a table."""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Final

import orjson
from yarl import URL

from ollama_tap.cli.admin_api import (
    ApiError,
    add_options,
    base_url,
    get_json,
    token_for,
    warn_in_clear,
)
from ollama_tap.cli.figures import compact_time, seconds, short_ids
from ollama_tap.cli.listing import Column, table_lines, width_wanted
from ollama_tap.cli.options import fail

DEFAULT_URL: Final = "http://127.0.0.1:11435"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `loads` to the CLI's subparsers."""
    p = sub.add_parser("loads", help="recent model loads and their causes, from a running proxy")
    add_options(p, os.environ.get("OLLAMA_TAP_URL", DEFAULT_URL))
    p.add_argument("--model", help="only this model's loads")
    p.add_argument("--box", help="only this box's loads (its --upstream NAME)")
    p.add_argument("--limit", type=int, default=100, help="most events shown (newest)")
    p.add_argument("--json", action="store_true", help="print the events as JSON")
    p.set_defaults(func=run_loads)


def fetch(
    url: URL, token: str | None, model: str | None, limit: int, box: str | None = None
) -> list[dict[str, Any]]:
    """The events /_tap/api/loads lists, newest first (ApiError naming the fix)."""
    wanted = {"model": model, "box": box}
    query = urllib.parse.urlencode({"limit": limit, **{k: v for k, v in wanted.items() if v}})
    body = get_json(url, f"/_tap/api/loads?{query}", token, timeout=10)
    loads = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(loads, list):
        raise ApiError(f"{url} did not answer as ollama-tap does; is it ollama-tap? (--url)")
    return loads


def columns(ids: dict[str, str], now: float) -> tuple[Column, ...]:
    """The table's columns (the inspector's Loads view shows the same), by the rules of
    `records list`: at 80 columns the decoration goes (waited, detail) and the names are
    shortened, while when, which model, why, who, the request (as `records show` takes
    it) and the load's length stay whole."""
    return (
        Column("time", lambda e: compact_time(e["at"], now), keep=85),
        Column(
            "model",
            lambda e: e["model"] + (f"→{e['box']}" if e.get("box") else ""),
            keep=90,
            cap=20,
        ),
        Column("cause", lambda e: e["cause"], keep=100),
        Column("client", lambda e: e.get("client") or e.get("address") or "-", keep=82, cap=12),
        Column("request", lambda e: ids.get(e.get("request") or "", "-"), keep=100),
        Column("load", _load, right=True, keep=88),
        Column("waited", lambda e: str(len(e.get("waited") or [])), right=True, keep=20),
        Column("detail", lambda e: e.get("detail") or "", keep=30, cap=24),
    )


def _load(event: dict[str, Any]) -> str:
    return seconds(event.get("load_duration")) or "-"


def table(events: list[dict[str, Any]], width: int | None, now: float | None = None) -> list[str]:
    ids = short_ids([e["request"] for e in events if e.get("request")])
    when = time.time() if now is None else now
    return table_lines(events, columns(ids, when), width)


def run_loads(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        return fail("loads", "--limit must be from 1 to 500")
    try:
        url = base_url(args.url)
        token = token_for(url, args)
        warn_in_clear("loads", url, token)
        events = fetch(url, token, args.model, args.limit, args.box)
    except ApiError as exc:
        return fail("loads", exc)
    if args.json:
        sys.stdout.write(orjson.dumps(events).decode() + "\n")
        return 0
    print("\n".join(table(events, width_wanted(sys.stdout))))
    return 0

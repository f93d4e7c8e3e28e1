"""`ollama-tap loads`: the proxy's recent model load events (its /_tap/api/loads), as a table."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from datetime import datetime
from typing import Any, Final

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text
from yarl import URL

from ollama_tap.cli.admin_api import (
    ApiError,
    add_options,
    base_url,
    get_json,
    token_for,
    warn_in_clear,
)
from ollama_tap.cli.options import fail

DEFAULT_URL: Final = "http://127.0.0.1:11435"
COLUMNS: Final = ("TIME", "MODEL", "CAUSE", "DETAIL", "CLIENT", "REQUEST", "LOAD", "WAITED")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `loads` to the CLI's subparsers."""
    p = sub.add_parser("loads", help="recent model loads and their causes, from a running proxy")
    add_options(p, os.environ.get("OLLAMA_TAP_URL", DEFAULT_URL))
    p.add_argument("--model", help="only this model's loads")
    p.add_argument("--limit", type=int, default=100, help="most events shown (newest)")
    p.add_argument("--json", action="store_true", help="print the events as JSON")
    p.set_defaults(func=run_loads)


def fetch(url: URL, token: str | None, model: str | None, limit: int) -> list[dict[str, Any]]:
    """The events /_tap/api/loads lists, newest first (ApiError naming the fix)."""
    query = urllib.parse.urlencode({"limit": limit, **({"model": model} if model else {})})
    body = get_json(url, f"/_tap/api/loads?{query}", token, timeout=10)
    loads = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(loads, list):
        raise ApiError(f"{url} did not answer as ollama-tap does; is it ollama-tap? (--url)")
    return loads


def row(event: dict[str, Any]) -> tuple[str, ...]:
    """One event as the table's cells (the inspector's Loads view shows the same)."""
    at = datetime.fromtimestamp(event["at"]).strftime("%Y-%m-%d %H:%M:%S")
    load = event.get("load_duration")
    return (
        at,
        event["model"],
        event["cause"],
        event.get("detail") or "",
        event.get("client") or "-",
        event.get("request") or "-",
        "-" if load is None else f"{load:.2f}s",
        str(len(event.get("waited") or [])),
    )


def run_loads(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        return fail("loads", "--limit must be from 1 to 500")
    try:
        url = base_url(args.url)
        token = token_for(url, args)
        warn_in_clear("loads", url, token)
        events = fetch(url, token, args.model, args.limit)
    except ApiError as exc:
        return fail("loads", exc)
    if args.json:
        sys.stdout.write(orjson.dumps(events).decode() + "\n")
        return 0
    table = Table(*COLUMNS, box=None)
    for event in events:
        table.add_row(*(Text(cell) for cell in row(event)))
    Console(soft_wrap=True, highlight=False).print(table)
    return 0

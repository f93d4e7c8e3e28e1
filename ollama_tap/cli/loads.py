"""`ollama-tap loads`: the proxy's recent model load events (its /_tap/api/loads), as a table."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any, Final

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ollama_tap.cli.options import fail
from ollama_tap.config import Settings

DEFAULT_URL: Final = "http://127.0.0.1:11435"
COLUMNS: Final = ("TIME", "MODEL", "CAUSE", "DETAIL", "CLIENT", "REQUEST", "LOAD", "WAITED")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `loads` to the CLI's subparsers."""
    p = sub.add_parser("loads", help="recent model loads and their causes, from a running proxy")
    p.add_argument(
        "--url",
        default=os.environ.get("OLLAMA_TAP_URL", DEFAULT_URL),
        help=f"the proxy's URL (default: $OLLAMA_TAP_URL, else {DEFAULT_URL})",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("OLLAMA_TAP_ADMIN_TOKEN"),
        help="admin token (default: $OLLAMA_TAP_ADMIN_TOKEN, else the admin-token file "
        "beside the database)",
    )
    p.add_argument("--model", help="only this model's loads")
    p.add_argument("--limit", type=int, default=100, help="most events shown (newest)")
    p.add_argument("--json", action="store_true", help="print the events as JSON")
    p.set_defaults(func=run_loads)


def _token(given: str | None) -> str | None:
    if given:
        return given
    # auth.token_file's place; auth itself is not imported, it loads the server stack.
    path = Settings.model_validate({}).db_path.parent / "admin-token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def fetch(url: str, token: str | None, model: str | None, limit: int) -> list[dict[str, Any]]:
    """The events /_tap/api/loads lists, newest first; raises OSError with the reason."""
    query = urllib.parse.urlencode({"limit": limit, **({"model": model} if model else {})})
    request = urllib.request.Request(f"{url.rstrip('/')}/_tap/api/loads?{query}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            body = orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = orjson.loads(exc.read() or b"{}").get("error", exc.reason)
        raise OSError(f"{url}: HTTP {exc.code}: {detail}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"cannot reach the proxy at {url} ({exc.reason}); pass --url") from None
    loads: list[dict[str, Any]] = body["loads"]
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
        event.get("client_name") or event.get("client") or "-",
        event.get("request") or "-",
        "-" if load is None else f"{load:.2f}s",
        str(len(event.get("waited") or [])),
    )


def run_loads(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        return fail("loads", "--limit must be from 1 to 500")
    try:
        events = fetch(args.url, _token(args.token), args.model, args.limit)
    except (OSError, orjson.JSONDecodeError, KeyError) as exc:
        return fail("loads", exc)
    if args.json:
        sys.stdout.write(orjson.dumps(events).decode() + "\n")
        return 0
    table = Table(*COLUMNS, box=None)
    for event in events:
        table.add_row(*(Text(cell) for cell in row(event)))
    Console(soft_wrap=True, highlight=False).print(table)
    return 0

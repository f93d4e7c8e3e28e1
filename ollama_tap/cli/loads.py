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

from ollama_tap.cli.figures import compact_time, seconds, short_ids
from ollama_tap.cli.listing import Column, table_lines, width_wanted
from ollama_tap.cli.options import fail
from ollama_tap.config import Settings

DEFAULT_URL: Final = "http://127.0.0.1:11435"


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


def columns(ids: dict[str, str], now: float) -> tuple[Column, ...]:
    """The table's columns (the inspector's Loads view shows the same), by the rules of
    `records list`: at 80 columns the decoration goes (waited, detail) and the names are
    shortened, while when, which model, why, who, the request (as `records show` takes
    it) and the load's length stay whole."""
    return (
        Column("time", lambda e: compact_time(e["at"], now), keep=85),
        Column("model", lambda e: e["model"], keep=90, cap=20),
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
        events = fetch(args.url, _token(args.token), args.model, args.limit)
    except (OSError, orjson.JSONDecodeError, KeyError) as exc:
        return fail("loads", exc)
    if args.json:
        sys.stdout.write(orjson.dumps(events).decode() + "\n")
        return 0
    print("\n".join(table(events, width_wanted(sys.stdout))))
    return 0

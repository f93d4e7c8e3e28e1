"""`ollama-tap replay serve|send`: answer as an Ollama from recordings, or re-send them."""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
from collections import deque
from typing import Any, Final, TextIO

import orjson
from rich.console import Console

from ollama_tap.cli.options import (
    add_db_option,
    add_time_options,
    fail,
    positive,
    resending,
    settings_with_db,
    store_from,
)
from ollama_tap.config import ConfigError, bind_addresses, binds_loopback, parse_ollama_host
from ollama_tap.ports import busy_message
from ollama_tap.recorder.backend import StoreError
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters
from ollama_tap.replay.matching import NORMALISED, MatchMode
from ollama_tap.replay.report import document, render
from ollama_tap.replay.sending import POLLING, Plan, send_all, skip_reason
from ollama_tap.replay.thresholds import parse_rule

PORT: Final = 11436
"""`replay serve`'s default: not 11434, where the Ollama it stands in for (or tests against)
may be listening, and not 11435, the proxy's; one above both, so a proxy can sit in front
of a replay (`serve --upstream http://127.0.0.1:11436`)."""

_RULE_HELP = (
    "fail (exit 1) when an aggregate ratio now/recorded meets this rule, e.g. "
    "'decode_rate < 0.8' or 'ttft.p95 > 1.5'; repeatable (docs/replay.md)"
)


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(
        model=args.model, endpoint=args.endpoint, client=args.client,
        since=args.since, until=args.until, instance=args.instance,
    )  # fmt: skip


def _where(args: argparse.Namespace) -> str:
    return "the default database" if args.db is None else str(args.db)


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from ollama_tap.logs import configure
    from ollama_tap.replay.serving import Pacing, load, replay_app

    if not args.speed > 0 or args.speed == float("inf"):  # nan compares false
        return fail("replay serve", "--speed must be a number above 0, e.g. 2")
    problem = _bind_problem(args.host, args.port)
    if problem is not None:
        return fail("replay serve", problem)
    loopback = binds_loopback(args.host)
    if args.no_token and not loopback:
        return fail("replay serve", "--no-token is allowed on loopback binds only (the "
                    "recordings hold other people's prompts); bind --host 127.0.0.1 or drop "
                    "--no-token")  # fmt: skip
    token = None if args.no_token else _token(args)
    if token is None and not loopback:
        return fail("replay serve", "OLLAMA_TAP_ADMIN_TOKEN=none is allowed on loopback binds "
                    "only; set a token or bind --host 127.0.0.1")  # fmt: skip
    store = store_from(args)
    recordings = load(store, _filters(args), MatchMode(args.match), args.loop)
    refused = sum(len(ids) for ids in recordings.library.refused.values())
    if not len(recordings.library):
        why = (
            f" ({refused} were recorded in metadata mode, which keeps no bodies)" if refused else ""
        )
        return fail("replay serve", f"no record in {_where(args)} can be served{why}; record with "
                    "--record full (the default on loopback) to replay")  # fmt: skip
    configure()
    note = f"; {refused} metadata-mode records refused (no bodies)" if refused else ""
    mode = MatchMode(args.match)
    how = f"--match body: {NORMALISED}" if mode is MatchMode.BODY else f"--match {mode}"
    print(
        f"ollama-tap replay: serving {len(recordings.library)} recordings from {_where(args)} on "
        f"http://{args.host}:{args.port}{note}\n  {how}\n  {_access(args, token, loopback)}"
        + (f"\n  port {PORT}, not Ollama's 11434: point clients at "
           f"OLLAMA_HOST={args.host}:{args.port}" if args.port == PORT else ""),
        file=sys.stderr,
    )  # fmt: skip
    pacing = Pacing(args.speed, not args.no_pacing)
    app = replay_app(
        store, recordings, pacing, token=token, loopback=loopback, explain=args.explain_misses
    )
    try:
        web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    except OSError as exc:  # taken between the check and the bind, or not ours to take
        return fail("replay serve", f"cannot listen on {args.host}:{args.port} "
                    f"({exc.strerror or exc}); listen elsewhere with --port")  # fmt: skip
    return 0


def _bind_problem(host: str, port: int) -> str | None:
    """Why `replay serve` cannot listen on host:port (said before the database is read)."""
    if not 0 <= port <= 65535:
        return f"--port {port} is not a port; give 0 to 65535, e.g. 11436"
    try:
        bind_addresses(host)
    except OSError as exc:
        return (f"--host {host!r} cannot be resolved ({exc.strerror or exc}); give an IP "
                "address (e.g. 127.0.0.1) or a name this machine resolves")  # fmt: skip
    return busy_message(host, port, fix="--port")


def _token(args: argparse.Namespace) -> str | None:
    """The admin token `serve` would use with this --db (ConfigError names the fix)."""
    from ollama_tap.auth import admin_token  # the server stack: for `replay serve` alone

    return admin_token(settings_with_db(args))


def _access(args: argparse.Namespace, token: str | None, loopback: bool) -> str:
    """The banner's second line: who may read, and how."""
    if token is None:
        return "no token (--no-token): every local user can read the recordings"
    from ollama_tap.auth import token_file

    where = "OLLAMA_TAP_ADMIN_TOKEN" if os.environ.get("OLLAMA_TAP_ADMIN_TOKEN") else None
    if where is None:
        where = str(token_file(settings_with_db(args)))
    access = f"clients send 'Authorization: Bearer <the admin token>' (from {where})"
    if not loopback:
        access += (
            "\n  WARNING: plain HTTP on a non-loopback address: the token and the recordings "
            "cross the network in clear; put a TLS front before it (docs/security.md)"
        )
    return access


def _selected(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    kept: deque[dict[str, Any]] = deque(maxlen=args.limit)
    skipped: list[dict[str, str]] = []
    for record in store_from(args).each(_filters(args)):
        reason = skip_reason(record, args.include_management)
        if reason is None:
            kept.append(record)
        elif reason != POLLING:
            skipped.append({"id": record["id"], "reason": reason})
    return list(kept), skipped[-args.limit :]


def cmd_send(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Exit 0, 1 when a --fail-if rule failed, 2 on misuse or when nothing can be sent."""
    try:
        to = parse_ollama_host(args.to)
    except ConfigError as exc:
        return fail("replay send", exc) + 1
    records, skipped = _selected(args)
    if not records:
        reasons = "; ".join(sorted({s["reason"] for s in skipped})) or "no record matches"
        return fail("replay send", f"nothing to re-send ({reasons})") + 1
    plan = Plan(to, max(1, args.concurrency), args.pace)
    with resending(len(records), not args.json) as tick:
        pairs = asyncio.run(send_all(plan, records, tick))
    doc = document(str(to), records, pairs, skipped, args.fail_if)
    stream = out or sys.stdout
    if args.json:
        stream.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(Console(file=stream), doc, wide=args.wide)
    return 1 if doc["failed"] else 0


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except (SchemaError, ConfigError, StoreError) as exc:
            return fail("replay", exc) + 1
        except sqlite3.DatabaseError as exc:
            where = args.db or "the database"
            return fail("replay", f"{where} cannot be read as an ollama-tap database ({exc}); "
                        "give the --db `serve` records to") + 1  # fmt: skip
        except OSError as exc:  # the listening socket, taken since the check
            return fail("replay", exc) + 1

    return run


def _common(p: argparse.ArgumentParser) -> None:
    add_db_option(p)
    p.add_argument("--model", help="only this model (any spelling Ollama accepts)")
    p.add_argument("--endpoint", help="only this endpoint, e.g. /api/chat")
    add_time_options(p)
    p.add_argument("--client", help="only this client name (its record's client_name)")
    p.add_argument("--instance", help="only records made by this tap (its --instance)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = sub.add_parser("replay", help="serve recordings as an Ollama, or re-send them")
    rsub = replay.add_subparsers(dest="replay_command", required=True, metavar="ACTION")
    p = rsub.add_parser("serve", help="answer as an Ollama from the recordings")
    _common(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind [default: 127.0.0.1]")
    p.add_argument("--port", type=int, default=PORT,
                   help=f"port [default: {PORT}; not 11434, Ollama's own]")  # fmt: skip
    p.add_argument("--match", choices=[m.value for m in MatchMode], default="body",
                   help=f"exact: every body field; body: {NORMALISED} (a client's defaults); "
                   "nearest: as body, and a miss gets the closest recording on its route "
                   "[default: body]")  # fmt: skip
    p.add_argument("--speed", type=float, default=1.0, help="2 plays twice as fast [default: 1]")
    p.add_argument("--no-pacing", action="store_true", help="no recorded timing: at once")
    p.add_argument("--no-token", action="store_true",
                   help="serve without the admin token (loopback binds only; every local "
                   "user can then read the recordings) [default: the admin token, sent as "
                   "'Authorization: Bearer', is required]")  # fmt: skip
    p.add_argument("--loop", action="store_true",
                   help="repeated requests cycle through their recordings (default: the "
                   "last one again)")  # fmt: skip
    p.add_argument("--explain-misses", action="store_true",
                   help="a miss's 404 names the closest record and the first field that "
                   "differs (anyone who can connect then learns the recorded bodies one "
                   "guess at a time) [default: the log says it, the reply does not]")  # fmt: skip
    p.set_defaults(func=_guarded(cmd_serve))
    p = rsub.add_parser("send", help="re-send recorded requests and compare the figures")
    _common(p)
    p.add_argument("--to", required=True, help="the upstream to send to, e.g. http://gpu2:11434")
    p.add_argument(
        "--limit", type=positive, default=100, help="the newest N records [default: 100]"
    )
    p.add_argument(
        "--concurrency", type=positive, default=1, help="requests in flight [default: 1]"
    )
    p.add_argument("--pace", choices=("original", "none"), default="none",
                   help="original: at the recorded intervals; none: back to back "
                   "[default: none]")  # fmt: skip
    p.add_argument("--include-management", action="store_true",
                   help="also re-send pull, push, create, copy and delete")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document (docs/replay.md)")
    p.add_argument("--wide", action="store_true",
                   help="the per-request table even when wider than the terminal")  # fmt: skip
    p.add_argument("--fail-if", type=parse_rule, action="append", default=[], help=_RULE_HELP)
    p.set_defaults(func=_guarded(cmd_send))

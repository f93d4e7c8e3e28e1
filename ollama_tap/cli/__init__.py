"""The `ollama-tap` command: the parser, `serve` (one flag per Settings field) and main."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from ollama_tap.cli import (
    bench,
    context,
    decode,
    loads,
    models,
    records,
    replay,
    suggest,
    top,
    upgrade,
)
from ollama_tap.cli.options import VersionAction
from ollama_tap.config import ConfigError, Settings, is_postgres_url
from ollama_tap.credentials import redacted_url
from ollama_tap.dbclaim import claimed
from ollama_tap.ports import busy_message
from ollama_tap.recorder.schema import SchemaError

# Fields whose None means "worked out at start-up": --help shows what that is here and now.
_COMPUTED: dict[str, Callable[[Settings], object]] = {
    "upstream": lambda s: ", ".join(
        f"{b.name}={b.url}" if s.named_boxes else str(b.url) for b in s.boxes
    ),
    "db": lambda s: redacted_url(str(s.db_location)),
    "instance": lambda s: s.instance_name,
    "record": lambda s: f"{s.record_mode} (on {s.host})",
    "admin_token": lambda s: f"generated, kept in {s.db_path.parent / 'admin-token'}",
}


def _flag_help(name: str, field: FieldInfo, computed: Settings | None) -> str:
    default = field.default
    if default in (None, ()) and computed is not None and name in _COMPUTED:
        default = _COMPUTED[name](computed)
    shown = "none" if default is None or default == () else default
    return f"{field.description} [default: {shown}; env OLLAMA_TAP_{name.upper()}]"


def _computed_defaults() -> Settings | None:
    """The settings as the environment makes them; None when it holds a bad value (which
    `serve` then reports)."""
    try:
        return Settings.model_validate({})
    except (ValidationError, ConfigError):
        return None


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per Settings field; unset flags leave the environment and defaults in charge."""
    computed = _computed_defaults()
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = str(extra.get("flag", "--" + name.replace("_", "-")))
        if isinstance(field.default, tuple):  # a repeatable flag (--client A=… --client B=…)
            parser.add_argument(
                flag,
                dest=name,
                action="append",
                default=argparse.SUPPRESS,
                metavar=str(extra.get("metavar", "RULE")),
                help=_flag_help(name, field, computed),
            )
        elif field.annotation is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=_flag_help(name, field, computed),
            )
        else:
            parser.add_argument(
                flag,
                default=argparse.SUPPRESS,
                metavar=name.upper(),
                help=_flag_help(name, field, computed),
            )


def settings_from(args: argparse.Namespace) -> Settings:
    values: dict[str, Any] = {
        name: getattr(args, name) for name in Settings.model_fields if hasattr(args, name)
    }
    return Settings(**values)


def _explain(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "settings"
        flag = "--" + where.replace("_", "-")
        lines.append(f"ollama-tap: {flag} (OLLAMA_TAP_{where.upper()}): {item['msg']}")
    return "\n".join(lines)


def _in_argv(args: argparse.Namespace) -> list[str]:
    """The secrets given as flags, which every local user sees in `ps`."""
    shown = []
    if getattr(args, "admin_token", None) not in (None, "none"):
        shown.append("--admin-token (use OLLAMA_TAP_ADMIN_TOKEN, or the generated token file)")
    db = getattr(args, "db", None)
    if is_postgres_url(db) and redacted_url(str(db)) != db:
        shown.append("the password in --db (use PGPASSWORD, ~/.pgpass or OLLAMA_TAP_DB)")
    return shown


def cmd_serve(args: argparse.Namespace) -> int:
    for secret in _in_argv(args):
        print(f"ollama-tap: warning: {secret} is visible to every local user in `ps`; see "
              "docs/security.md", file=sys.stderr)  # fmt: skip
    try:
        settings = settings_from(args)
        settings.check()
        busy = busy_message(settings.host, settings.port)
        if busy is not None:  # said before the server stack is even imported
            raise ConfigError(busy)
    except ValidationError as exc:
        print(_explain(exc), file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"ollama-tap: {exc}", file=sys.stderr)
        return 2
    # Imported here: the server stack (aiohttp's web server, uvloop, the app) is for
    # `serve` alone, and the other commands and --help start faster without it.
    from ollama_tap.serve import serve

    try:
        with claimed(settings):
            return serve(settings)
    except (ConfigError, SchemaError, OSError) as exc:
        # Start-up failures (a port in use, an unwritable --db, a database from a newer
        # ollama-tap) already say what is wrong: one line, not a traceback.
        print(f"ollama-tap: {exc}", file=sys.stderr)
        return 2
    except sqlite3.OperationalError as exc:
        # Locked, full, an I/O error: the file may be fine, and must not be moved aside.
        print(f"ollama-tap: cannot use the database {settings.db_path}: {exc}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:
        print(
            f"ollama-tap: the database {settings.db_path} cannot be used ({exc}); move it "
            "aside (or point --db elsewhere) to start with a new one.",
            file=sys.stderr,
        )
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ollama-tap",
        description="A transparent Ollama proxy that measures, exports and records every exchange.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="relay :11435 to Ollama, measuring and recording",
        description="Listen for Ollama clients and relay every request to Ollama unchanged.",
    )
    add_settings_flags(serve)
    serve.set_defaults(func=cmd_serve)
    for command in (records, decode, models, bench, loads, context, top, replay, upgrade):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    suggest.check(parser, given)
    args = parser.parse_args(given)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

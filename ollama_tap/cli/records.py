"""`ollama-tap records list|show|export`: read the recordings database directly (no token)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from itertools import pairwise
from pathlib import Path
from typing import IO, Any, BinaryIO

import orjson

from ollama_tap.cli.figures import find_record, rate, seconds
from ollama_tap.cli.listing import print_table
from ollama_tap.cli.options import (
    add_db_option,
    add_time_options,
    add_vocab_options,
    installed_version,
    positive,
    store_from,
    vocab_source,
)
from ollama_tap.cli.showing import head_lines
from ollama_tap.config import ConfigError
from ollama_tap.recorder.backend import StoreError as RecordsUnavailable
from ollama_tap.recorder.export import write_har, write_jsonl
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters
from ollama_tap.terminal import plural, printable
from ollama_tap.tokens.context import decode_record
from ollama_tap.tokens.errors import StoreError, VocabError
from ollama_tap.tokens.store import digest_hex
from ollama_tap.tokens.vocab import Vocab

Command = Callable[[argparse.Namespace], int]
_TOP = ("request", "response", "timeline", "context", "output", "thinking", "tool_calls")


def _filters(args: argparse.Namespace) -> Filters:
    return Filters(
        model=args.model, endpoint=args.endpoint, outcome=args.outcome, client=args.client,
        since=args.since, until=args.until, truncated=args.truncated, instance=args.instance,
        box=args.box,
    )  # fmt: skip


def cmd_list(args: argparse.Namespace) -> int:
    records, _ = store_from(args).page(_filters(args), args.limit)
    if args.json or args.jsonl:
        # For scripts: every summary field, whole and unformatted (seconds, unix times).
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(records) + b"\n")
        else:
            sys.stdout.buffer.writelines(orjson.dumps(r) + b"\n" for r in records)
        return 0
    print_table(records, plural(len(records), "record"))
    return 0


def timeline_summary(timeline: dict[str, Any]) -> str:
    offsets = timeline["offsets"]
    if not offsets:
        return "no output pieces"
    gaps = [b - a for a, b in pairwise(offsets)]
    kinds = ", ".join(f"{n} {k}" for k, n in Counter(timeline["kinds"]).items())
    text = "" if timeline["texts"] is not None else "; text not stored"
    line = f"{len(offsets)} pieces ({kinds}), first at {seconds(offsets[0])}"
    line += f", last at {seconds(offsets[-1])}"
    if gaps:
        line += f", gap median {seconds(statistics.median(gaps))}, max {seconds(max(gaps))}"
    span = offsets[-1] - offsets[0]
    if span > 0:
        line += f", {rate((len(offsets) - 1) / span, 'pieces/s')} observed"
    return line + text + ("; text truncated" if timeline["text_truncated"] else "")


def cmd_show(args: argparse.Namespace) -> int:
    record = find_record(store_from(args), args.id)
    if isinstance(record, str):
        print(f"ollama-tap: {record}.", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    lines = head_lines(record, args.id)
    for key in _TOP[:2]:
        if record.get(key):
            lines.append(
                f"\n[{key}]\n{orjson.dumps(record[key], option=orjson.OPT_INDENT_2).decode()}"
            )
    for key in ("thinking", "output"):
        if record.get(key):
            lines.append(f"\n[{key}]\n{record[key]}")
    if record.get("tool_calls"):
        lines.append(f"\n[tool_calls]\n{orjson.dumps(record['tool_calls']).decode()}")
    lines.append(f"\n[context] {context_summary(asyncio.run(_decoded_context(args, record)))}")
    if record.get("timeline") is not None:
        lines.append(f"\n[timeline] {timeline_summary(record['timeline'])}")
    print(printable("\n".join(lines)))  # recorded text: no escape sequence reaches a terminal
    return 0


async def _decoded_context(args: argparse.Namespace, record: dict[str, Any]) -> dict[str, Any]:
    try:
        async with vocab_source(args) as source:
            return await decode_record(record, source.load)
    except (StoreError, ConfigError) as exc:
        problem = str(exc)

    # A bad --store or --url: the record is still worth showing, and why it is not decoded.
    async def refuse(model: str, digest: str | None) -> Vocab:
        raise VocabError(problem)

    return await decode_record(record, refuse)


def context_summary(doc: dict[str, Any]) -> str:
    """The `decoded_context` document as a heading line and, when decoded, the text."""
    count = "" if doc["ids_count"] is None else f"{doc['ids_count']} token ids"
    if doc["text"] is None:
        return f"{count}{'; ' if count else ''}not decoded: {doc['unavailable']}"
    digest = f" (sha256:{digest_hex(doc['digest'])[:12]})" if doc["digest"] else ""
    return (
        f"{count}, decoded with the vocabulary of {doc['model']}{digest} from "
        f"{doc['vocabulary']}\n{doc['text']}"
    )


def _private(path: str) -> BinaryIO:
    """The file, truncated, and 0600 even if it existed with another mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def cmd_export(args: argparse.Namespace) -> int:
    records = store_from(args).each(_filters(args))
    # An export holds what the database holds: as private as it is (0600), whatever umask.
    target = _private(args.output) if args.output else nullcontext(sys.stdout.buffer)
    with target as out:
        if args.format == "jsonl":
            write_jsonl(records, out)
        else:
            _write_har(records, out)
    return 0


def _write_har(records: Any, out: IO[bytes]) -> None:
    write_har(records, out, installed_version())


def guarded(func: Command, command: str = "records") -> Command:
    """`func` reading the database, its failures one line naming the fix (`ollama-tap
    COMMAND: …`), never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            location = store_from(args).location
            if isinstance(location, Path) and not location.exists():
                print(f"ollama-tap {command}: no database at {location}; `ollama-tap serve` "
                      "records there (or give --db FILE)", file=sys.stderr)  # fmt: skip
                return 1
            return int(func(args))
        except (SchemaError, RecordsUnavailable, ConfigError) as exc:
            print(f"ollama-tap: {exc}", file=sys.stderr)
            return 2
        except sqlite3.DatabaseError as exc:
            where = args.db or "the database"
            print(f"ollama-tap {command}: {where} cannot be read as an ollama-tap database "
                  f"({exc}); give the --db `serve` records to", file=sys.stderr)  # fmt: skip
            return 2
        except OSError as exc:  # the output file of an export
            print(f"ollama-tap {command}: cannot write {exc.filename} ({exc.strerror}); give "
                  "-o a file path", file=sys.stderr)  # fmt: skip
            return 2

    return run


def _common(p: argparse.ArgumentParser, filters: bool) -> None:
    add_db_option(p)
    if filters:
        p.add_argument("--model", help="only this model (any spelling Ollama accepts)")
        p.add_argument("--endpoint", help="only this endpoint, e.g. /api/chat")
        p.add_argument("--outcome", help="only this outcome, e.g. ok, client_disconnected")
        p.add_argument("--client", help="only this client name, e.g. open-webui, curl")
        add_time_options(p)
        p.add_argument(
            "--truncated", action="store_true",
            help="only exchanges with a truncation verdict (docs/diagnoses.md)",
        )  # fmt: skip
        p.add_argument("--instance", help="only records made by this tap (its --instance)")
        p.add_argument("--box", help="only records a box served (its --upstream NAME)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    records = sub.add_parser("records", help="list, show and export recorded exchanges")
    rsub = records.add_subparsers(dest="records_command", required=True, metavar="ACTION")
    p = rsub.add_parser("list", help="a table of the newest records")
    _common(p, filters=True)
    p.add_argument("--limit", type=positive, default=50, help="most records shown [default: 50]")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON array, for scripts")
    shape.add_argument("--jsonl", action="store_true", help="one JSON object a line")
    p.set_defaults(func=guarded(cmd_list))
    p = rsub.add_parser(
        "show", help="every stored field of one record, its timeline and decoded context"
    )
    _common(p, filters=False)
    add_vocab_options(p)
    p.add_argument("id", help="the record id, whole or short (first column of `records list`)")
    p.add_argument("--json", action="store_true", help="the stored record as JSON, unformatted")
    p.set_defaults(func=guarded(cmd_show))
    p = rsub.add_parser("export", help="every matching record as JSONL or HAR 1.2")
    _common(p, filters=True)
    p.add_argument("--format", choices=("jsonl", "har"), default="jsonl", help="[default: jsonl]")
    p.add_argument("-o", "--output", type=Path, help="file to write [default: standard output]")
    p.set_defaults(func=guarded(cmd_export))

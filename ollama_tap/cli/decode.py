"""`ollama-tap decode`: token ids, given or recorded, back into text."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ollama_tap.cli.figures import find_record
from ollama_tap.cli.options import add_db_option, add_vocab_options, fail, store_from, vocab_source
from ollama_tap.config import ConfigError
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.terminal import escaped, printable
from ollama_tap.tokens.context import Unavailable, context_ids, token_docs
from ollama_tap.tokens.detok import Piece
from ollama_tap.tokens.errors import TokensError
from ollama_tap.tokens.vocab import Vocab

_SEPARATORS = re.compile(r"[\s,]+")
_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `decode` to the CLI's subparsers."""
    p = sub.add_parser(
        "decode",
        help="turn token ids (a `context` array) back into text",
        description="Decode token ids with a model's own vocabulary: from the local Ollama "
        "store, else the upstream's /api/show, or from a GGUF file; or a recorded reply's "
        "context (--record) with the vocabulary it was recorded with.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="NAME", help="model name, e.g. llama3.2:1b")
    source.add_argument("--gguf", metavar="FILE", type=Path, help="a GGUF file's vocabulary")
    source.add_argument(
        "--record", metavar="ID", help="a recorded /api/generate reply's context, decoded "
        "with the vocabulary of the model and digest it was recorded with",
    )  # fmt: skip
    p.add_argument(
        "ids", nargs="*", help="token ids; when none, read from stdin (JSON array or "
        "whitespace-separated integers)",
    )  # fmt: skip
    add_vocab_options(p)
    add_db_option(p)
    p.add_argument("--tokens", action="store_true", help="print one row per token")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--hide-control", action="store_true", help="leave control tokens out")
    p.set_defaults(func=run_decode)


def parse_ids(text: str) -> list[int]:
    """Ids from a JSON array or from integers separated by whitespace or commas."""
    stripped = text.strip()
    try:
        values: Any = orjson.loads(stripped) if stripped.startswith("[") else [
            int(v) for v in _SEPARATORS.split(stripped) if v
        ]  # fmt: skip
    except (orjson.JSONDecodeError, ValueError):
        values = None
    if not isinstance(values, list) or not all(type(v) is int for v in values):
        raise TokensError(
            "token ids must be a JSON array of integers or integers separated by spaces"
        )
    if not values:
        raise TokensError("no token ids given; pass them as arguments or on stdin")
    return values


async def _fetch_vocab(args: argparse.Namespace, model: str, digest: str | None) -> Vocab:
    async with vocab_source(args) as source:
        return await source.load(model, digest)


def _recorded(args: argparse.Namespace) -> tuple[list[int], Vocab]:
    """A record's context ids and the vocabulary of the model and digest it was made with."""
    if args.ids:
        raise TokensError("--record reads the ids from the record; pass no ids with it")
    record = find_record(store_from(args), args.record)
    if isinstance(record, str):
        raise TokensError(record)
    found = context_ids(record)
    if isinstance(found, Unavailable):
        raise TokensError(f"record {args.record} has no context ids: {found.message}")
    if not record["model"]:
        raise TokensError(f"record {args.record} names no model to take the vocabulary of")
    return found, asyncio.run(_fetch_vocab(args, record["model"], record["model_digest"]))


def _ids_and_vocab(args: argparse.Namespace) -> tuple[list[int], Vocab]:
    """The ids to decode and their vocabulary, from whichever source option was given."""
    if args.record is not None:
        return _recorded(args)
    ids = parse_ids(" ".join(args.ids) if args.ids else sys.stdin.read())
    if args.gguf is not None:
        return ids, Vocab.from_gguf(args.gguf)
    return ids, asyncio.run(_fetch_vocab(args, args.model, None))


def run_decode(args: argparse.Namespace) -> int:
    """`ollama-tap decode`: exit 0 with the text, else 1 with one sentence on stderr."""
    try:
        ids, vocab = _ids_and_vocab(args)
        text = vocab.decode(ids, args.hide_control)
        pieces = vocab.pieces(ids) if args.tokens else []
    except (TokensError, ConfigError, SchemaError) as exc:
        return fail("decode", exc)
    if args.json:
        doc: dict[str, object] = {"model": vocab.model, "source": vocab.source, "text": text}
        if args.tokens:
            doc["tokens"] = token_docs(pieces)
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    elif args.tokens:
        _print_pieces(pieces)
    else:
        sys.stdout.write(printable(text) + ("" if text.endswith("\n") else "\n"))
    return 0


def _print_pieces(pieces: list[Piece]) -> None:
    table = Table("id", "piece", "kind", box=None)
    for p in pieces:
        # A piece is shown as text even piped: its control characters always escaped.
        table.add_row(str(p.id), Text(escaped(p.text.translate(_ESCAPES))), p.kind)
    Console(soft_wrap=True).print(table)

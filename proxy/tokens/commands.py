"""The `decode` and `models` subcommands of the ollama-tap CLI."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from proxy.config import DEFAULT_UPSTREAM, ConfigError, resolve_upstream
from proxy.recorder.schema import SchemaError
from proxy.terminal import escaped, printable
from proxy.tokens.context import Unavailable, context_ids, token_docs
from proxy.tokens.detok import Piece
from proxy.tokens.errors import StoreError, TokensError
from proxy.tokens.store import Inspection, Manifest, ModelStore, inspect
from proxy.tokens.vocab import Vocab, VocabSource

_SEPARATORS = re.compile(r"[\s,]+")
_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `decode` and `models list|inspect` to the CLI's subparsers."""
    _register_decode(sub)
    _register_models(sub)


def _register_decode(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "decode",
        help="turn token ids (a `context` array) back into text",
        description="Decode token ids with a model's own vocabulary: from the local Ollama "
        "store, else the upstream's /api/show, or from a GGUF file; or a recorded reply's "
        "context (--record) with the vocabulary it was recorded with.",
    )
    # Imported here: proxy.recorder.commands imports this module for `records show`.
    from proxy.recorder.commands import add_db_option

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


def add_vocab_options(p: argparse.ArgumentParser) -> None:
    """--url and --store: where `vocab_source` looks for vocabularies."""
    p.add_argument(
        "--url",
        default=os.environ.get("OLLAMA_TAP_UPSTREAM"),
        help=f"Ollama's URL for /api/show (default: $OLLAMA_TAP_UPSTREAM, else $OLLAMA_HOST, "
        f"else {DEFAULT_UPSTREAM})",
    )
    p.add_argument("--store", type=Path, help="Ollama models directory (default: as Ollama)")


def _register_models(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("models", help="list and inspect the local Ollama model store")
    actions = p.add_subparsers(dest="models_command", required=True, metavar="{list,inspect}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", type=Path, help="Ollama models directory (default: as Ollama)")
    common.add_argument("--json", action="store_true", help="print JSON")
    listing = actions.add_parser("list", parents=[common], help="models in the store")
    listing.set_defaults(func=run_models_list)
    one = actions.add_parser(
        "inspect", parents=[common], help="layers, blob checks and GGUF facts of one model"
    )
    one.add_argument("name", metavar="NAME[:TAG]")
    one.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of blobs")
    one.set_defaults(func=run_models_inspect)


def _fail(command: str, message: object) -> int:
    print(f"ollama-tap {command}: {message}", file=sys.stderr)
    return 1


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


@asynccontextmanager
async def vocab_source(args: argparse.Namespace) -> AsyncIterator[VocabSource]:
    """The vocabulary source `add_vocab_options` configured, with its own HTTP session.

    Raises StoreError for a --store that is no model store, ConfigError for a bad --url.
    """
    store = ModelStore.locate(args.store) if args.store else ModelStore.on_this_disk()
    upstream = resolve_upstream(args.url, os.environ.get("OLLAMA_HOST"))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield VocabSource(session, upstream, store)


async def _fetch_vocab(args: argparse.Namespace, model: str, digest: str | None) -> Vocab:
    async with vocab_source(args) as source:
        return await source.load(model, digest)


def _recorded(args: argparse.Namespace) -> tuple[list[int], Vocab]:
    """A record's context ids and the vocabulary of the model and digest it was made with."""
    from proxy.recorder.commands import store_from  # see _register_decode

    if args.ids:
        raise TokensError("--record reads the ids from the record; pass no ids with it")
    record = store_from(args).get(args.record)
    if record is None:
        raise TokensError(f"no record {args.record!r}; `ollama-tap records list` shows them")
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
        return _fail("decode", exc)
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


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _manifest_doc(m: Manifest) -> dict[str, object]:
    return {"name": m.name, "digest": m.digest, "size": m.size, "modified": m.modified.isoformat()}


def run_models_list(args: argparse.Namespace) -> int:
    """`ollama-tap models list`: every model in the store."""
    try:
        manifests = ModelStore.locate(args.store).manifests()
    except StoreError as exc:
        return _fail("models list", exc)
    if args.json:
        sys.stdout.write(orjson.dumps([_manifest_doc(m) for m in manifests]).decode() + "\n")
        return 0
    table = Table("NAME", "ID", "SIZE", "MODIFIED", box=None)
    for m in manifests:
        table.add_row(Text(m.name), m.digest[:12], _human(m.size), f"{m.modified:%Y-%m-%d %H:%M}")
    Console(soft_wrap=True).print(table)
    return 0


def _inspection_doc(found: Inspection) -> dict[str, object]:
    layers = [
        {"media_type": layer.media_type, "digest": layer.digest, "size": layer.size,
         "path": str(path)}
        for layer, path in zip(found.manifest.layers, found.blobs, strict=True)
    ]  # fmt: skip
    return {
        **_manifest_doc(found.manifest),
        "verified": found.verified,
        "layers": layers,
        "gguf": vars(found.facts),
        "model_path": str(found.model_path),
    }


def run_models_inspect(args: argparse.Namespace) -> int:
    """`ollama-tap models inspect NAME[:TAG]`: layers, blob checks, GGUF facts."""
    try:
        store = ModelStore.locate(args.store)
        found = inspect(store, args.name, not args.no_verify, progress=sys.stderr.isatty())
    except StoreError as exc:
        return _fail("models inspect", exc)
    doc = _inspection_doc(found)
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
    console = Console(soft_wrap=True, highlight=False)
    console.print(Text(f"{found.manifest.name}  sha256:{found.manifest.digest}"))
    # Lines, not a table: a narrow terminal must not cut the blob paths.
    for layer, path in zip(found.manifest.layers, found.blobs, strict=True):
        console.print(Text(f"  {layer.media_type}  {_human(layer.size)}\n    {path}"))
    console.print("blobs verified (size and SHA-256)" if found.verified else "blobs not verified")
    facts = Table(box=None, show_header=False)
    for key, value in vars(found.facts).items():
        facts.add_row(key.replace("_", " "), Text("-" if value is None else str(value)))
    console.print(facts)
    console.print(Text(f"llama.cpp model path: {found.model_path}"))
    return 0

"""`ollama-tap models list|inspect`: the local Ollama model store, and a bar while blobs hash."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ollama_tap.advice.report import human_bytes
from ollama_tap.cli.options import add_store_option, fail
from ollama_tap.cli.tags import Listed, TagsError, listed
from ollama_tap.config import ConfigError, resolve_upstream
from ollama_tap.tokens.errors import StoreError
from ollama_tap.tokens.store import Advance, Inspection, Manifest, ModelStore, inspect, unwatched

PROGRESS_MIN_BYTES: Final = 64 << 20
"""Blobs smaller than this hash too fast for a bar to be worth drawing."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `models list|inspect` to the CLI's subparsers."""
    p = sub.add_parser("models", help="list and inspect the local Ollama model store")
    actions = p.add_subparsers(dest="models_command", required=True, metavar="{list,inspect}")
    common = argparse.ArgumentParser(add_help=False)
    add_store_option(common)
    common.add_argument("--json", action="store_true", help="print JSON")
    listing = actions.add_parser(
        "list", parents=[common], help="models in the store, else as Ollama's /api/tags lists them"
    )
    listing.add_argument(
        "--url",
        default=os.environ.get("OLLAMA_TAP_UPSTREAM"),
        help="Ollama's URL, asked when there is no store (default: as `decode`)",
    )
    listing.set_defaults(func=run_models_list)
    one = actions.add_parser(
        "inspect", parents=[common], help="layers, blob checks and GGUF facts of one model"
    )
    one.add_argument("name", metavar="NAME[:TAG]")
    one.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of blobs")
    one.set_defaults(func=run_models_inspect)


def _manifest_doc(m: Manifest | Listed) -> dict[str, object]:
    return {"name": m.name, "digest": m.digest, "size": m.size, "modified": m.modified.isoformat()}


def run_models_list(args: argparse.Namespace) -> int:
    """`ollama-tap models list`: every model in the store; without one, Ollama's list."""
    manifests: list[Manifest] | list[Listed]
    try:
        manifests = ModelStore.locate(args.store).manifests()
    except StoreError as exc:
        if args.store is not None:
            return fail("models list", exc)  # the store asked for, not a stand-in
        try:
            upstream = resolve_upstream(args.url, os.environ.get("OLLAMA_HOST"))
            manifests = asyncio.run(listed(upstream))
        except (TagsError, ConfigError) as tags_exc:
            return fail("models list", f"{exc}; and Ollama's list: {tags_exc}")
        print(f"ollama-tap models list: {exc}; listing {upstream}/api/tags", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps([_manifest_doc(m) for m in manifests]).decode() + "\n")
        return 0
    table = Table("NAME", "ID", "SIZE", "MODIFIED", box=None)
    for m in manifests:
        table.add_row(
            Text(m.name), m.digest[:12], human_bytes(m.size), f"{m.modified:%Y-%m-%d %H:%M}"
        )
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


@contextmanager
def _bar(path: Path, size: int) -> Iterator[Advance]:
    """A transient bar on stderr while a large blob is hashed."""
    if size < PROGRESS_MIN_BYTES:
        with unwatched(path, size) as advance:
            yield advance
        return
    columns = ("{task.description}", BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"verify {path.name[:19]}", total=size)
        yield lambda length: bar.advance(task, length)


def run_models_inspect(args: argparse.Namespace) -> int:
    """`ollama-tap models inspect NAME[:TAG]`: layers, blob checks, GGUF facts."""
    watch = _bar if sys.stderr.isatty() else unwatched
    try:
        store = ModelStore.locate(args.store)
        found = inspect(store, args.name, not args.no_verify, watch)
    except StoreError as exc:
        return fail("models inspect", exc)
    doc = _inspection_doc(found)
    if args.json:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        return 0
    console = Console(soft_wrap=True, highlight=False)
    console.print(Text(f"{found.manifest.name}  sha256:{found.manifest.digest}"))
    # Lines, not a table: a narrow terminal must not cut the blob paths.
    for layer, path in zip(found.manifest.layers, found.blobs, strict=True):
        console.print(Text(f"  {layer.media_type}  {human_bytes(layer.size)}\n    {path}"))
    console.print("blobs verified (size and SHA-256)" if found.verified else "blobs not verified")
    facts = Table(box=None, show_header=False)
    for key, value in vars(found.facts).items():
        facts.add_row(key.replace("_", " "), Text("-" if value is None else str(value)))
    console.print(facts)
    console.print(Text(f"llama.cpp model path: {found.model_path}"))
    return 0

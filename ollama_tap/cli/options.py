"""What several subcommands share: --db, --url and --store, and the one-line failure."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from ollama_tap.config import DEFAULT_UPSTREAM, Settings, resolve_upstream
from ollama_tap.recorder.store import Store
from ollama_tap.tokens.store import ModelStore
from ollama_tap.tokens.vocab import VocabSource


def add_db_option(p: argparse.ArgumentParser) -> None:
    """--db, read by `store_from`."""
    p.add_argument(
        "--db",
        default=None,
        help="database file or postgresql:// URL [default: as serve: $OLLAMA_TAP_DB, else "
        "the XDG data dir]",
    )


def store_from(args: argparse.Namespace) -> Store:
    """The database `add_db_option` chose: --db, else where `serve` records."""
    values = {} if args.db is None else {"db": args.db}
    return Store(Settings.model_validate(values).db_location)


def add_vocab_options(p: argparse.ArgumentParser) -> None:
    """--url and --store: where `vocab_source` looks for vocabularies."""
    p.add_argument(
        "--url",
        default=os.environ.get("OLLAMA_TAP_UPSTREAM"),
        help=f"Ollama's URL for /api/show (default: $OLLAMA_TAP_UPSTREAM, else $OLLAMA_HOST, "
        f"else {DEFAULT_UPSTREAM})",
    )
    add_store_option(p)


def add_store_option(p: argparse.ArgumentParser) -> None:
    """--store: the Ollama models directory, else the one Ollama itself would use."""
    p.add_argument("--store", type=Path, help="Ollama models directory (default: as Ollama)")


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


def fail(command: str, message: object) -> int:
    """Exit status 1, after one line on stderr naming the command (`ollama-tap decode: …`)."""
    print(f"ollama-tap {command}: {message}", file=sys.stderr)
    return 1


@contextmanager
def resending(total: int, shown: bool) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for requests re-sent (when `shown`, and stderr is a terminal),
    gone when done; yields the call that counts one more."""
    with Progress(
        "re-sending", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=not (shown and sys.stderr.isatty()), transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task("", total=total)
        yield lambda: progress.advance(task)

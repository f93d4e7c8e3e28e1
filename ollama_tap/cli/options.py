"""What several subcommands share: --db, --url and --store, and the one-line failure."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from ollama_tap import compiled
from ollama_tap.config import DEFAULT_UPSTREAM, ConfigError, Settings, resolve_upstream
from ollama_tap.recorder.store import Store, parse_time
from ollama_tap.tokens.store import ModelStore
from ollama_tap.tokens.vocab import VocabSource


def installed_version() -> str:
    """The installed distribution's version ("unknown" when run from sources not installed)."""
    try:
        return version("ollama-tap")
    except PackageNotFoundError:
        return "unknown"


def version_line() -> str:
    """What `ollama-tap --version` prints: the version, the build and the Python."""
    build = "compiled" if compiled.active() else "interpreted"
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"ollama-tap {installed_version()} ({build} build, Python {python})"


class VersionAction(argparse.Action):
    """`--version`, worked out only when asked: which build runs is known by importing the
    relay, which the parser of every other command must not load."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_line())
        parser.exit()


def time_argument(value: str) -> float:
    """`--since`/`--until`: argparse prints the reason and the forms, not a type's name."""
    try:
        return parse_time(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_time_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", type=time_argument,
                   help="from this time: 30m, 1h, 2d ago, unix seconds or ISO 8601")  # fmt: skip
    p.add_argument("--until", type=time_argument, help="before this time (the same forms)")


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
    return Store(settings_with_db(args).db_location)


def settings_with_db(args: argparse.Namespace) -> Settings:
    """The settings as `serve` would make them with this --db (ConfigError naming the fix
    for a value that cannot be one, its password left out)."""
    values = {} if args.db is None else {"db": args.db}
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        # Only the messages: the error's own text quotes the input, a URL's password too.
        raise ConfigError("; ".join(str(e["msg"]) for e in exc.errors())) from None


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


def whole(text: str) -> int:
    """An argparse type: a whole number (argparse's one-line error otherwise)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


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

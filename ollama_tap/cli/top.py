"""`ollama-tap top`: what a proxy has in flight now, refreshed every second (`q` quits)."""

from __future__ import annotations

import argparse
import contextlib
import select
import sys
import time
from collections.abc import Iterator
from typing import Any, Final

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from yarl import URL

from ollama_tap.cli.admin_api import (
    ApiError,
    add_options,
    base_url,
    get_json,
    token_for,
    warn_in_clear,
)
from ollama_tap.cli.options import fail

DEFAULT_URL: Final = "http://127.0.0.1:11435"
REFRESH: Final = 1.0
WIDTH: Final = 80
"""The frame fits an 80-column terminal whatever the names: cells end in "…"."""


def fetch(url: URL, token: str | None, timeout: float = 3.0) -> dict[str, Any]:
    """One answer of GET /_tap/api/inflight (ApiError naming the fix)."""
    body = get_json(url, "/_tap/api/inflight", token, timeout)
    if not isinstance(body, dict) or "exchanges" not in body:
        raise ApiError(f"{url} did not answer as ollama-tap does; is it ollama-tap? (--url)")
    return body


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value < 60 else f"{int(value // 60)}m{int(value % 60):02d}s"


def frame(snapshot: dict[str, Any] | None, url: str, problem: str | None = None) -> Group:
    """One screen: a heading line and a table of the exchanges in flight, oldest first."""
    if snapshot is None:
        return Group(Text(f"ollama-tap top · {url}", style="bold"), Text(problem or "", "red"))
    waiting = ", ".join(f"{n} {m or '(none)'}" for m, n in sorted(snapshot["waiting"].items()))
    # The address last: in 80 columns it is what gets cut.
    head = f"{snapshot['in_flight']} in flight" + (f" · waiting: {waiting}" if waiting else "")
    head += f" · {url}"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, width=WIDTH)
    # Widths that add up to 80 with the gaps; the names give way first, never the phase.
    for name, least, most, justify in (
        ("client", 6, 12, "left"), ("model", 8, 20, "left"), ("endpoint", 8, 18, "left"),
        ("phase", 9, 9, "left"), ("pos", 3, 3, "right"), ("elapsed", 7, 7, "right"),
        ("out", 5, 6, "right"), ("rate", 5, 6, "right"),
    ):  # fmt: skip
        table.add_column(
            name, min_width=least, max_width=most, no_wrap=True, overflow="ellipsis",
            justify=justify,  # type: ignore[arg-type]
        )  # fmt: skip
    for x in snapshot["exchanges"]:
        rate = "" if x["rate"] is None else f"{x['rate']:.1f}"
        position = "" if x["position"] is None else str(x["position"])
        style = "yellow" if x["phase"] == "waiting" else None
        cells = (x["client"], x["model"], x["endpoint"], x["phase"], position,
                 _seconds(x["elapsed"]), str(x["outputs"]), rate)  # fmt: skip
        # Text cells: names are printed as text, never read as rich markup.
        table.add_row(*(Text(str(c)) for c in cells), style=style)
    parts: list[Any] = [Text(head, style="bold", overflow="ellipsis", no_wrap=True), table]
    if problem:
        parts.append(Text(problem, style="red"))
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[bool]:
    """Single key presses from a terminal (cbreak mode, restored at the end); False when
    standard input is no terminal."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(timeout: float, keys: bool) -> bool:
    if not keys:
        time.sleep(timeout)
        return False
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and sys.stdin.read(1) in {"q", "Q"}


def cmd_top(args: argparse.Namespace) -> int:
    try:
        url = base_url(args.url)
        token = token_for(url, args)
    except ApiError as exc:
        return fail("top", exc)
    warn_in_clear("top", url, token)
    console = Console(width=min(Console().width, WIDTH) if not args.once else WIDTH)
    if args.once:
        try:
            console.print(frame(fetch(url, token), args.url))
        except ApiError as exc:
            return fail("top", exc)
        return 0
    snapshot: dict[str, Any] | None = None
    with _keys() as keys, Live(console=console, auto_refresh=False, screen=False) as live:
        while True:
            problem = None
            try:
                snapshot = fetch(url, token)
            except ApiError as exc:
                problem = str(exc)
            live.update(frame(snapshot, args.url, problem), refresh=True)
            if _quit_pressed(REFRESH, keys):
                return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help="what a proxy has in flight now, live (q quits)")
    add_options(p, DEFAULT_URL)
    p.add_argument("--once", action="store_true", help="print one frame and exit (for scripts)")
    p.set_defaults(func=cmd_top)

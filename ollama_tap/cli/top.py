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
from ollama_tap.terminal import escaped

DEFAULT_URL: Final = "http://127.0.0.1:11435"
REFRESH: Final = 1.0
WIDTH: Final = 80
"""The widest frame: it fits the terminal whatever the names (cells end in "…"), and a
terminal narrower than 80 columns loses the decoration first (rate, output count)."""


def fetch(url: URL, token: str | None, timeout: float = 3.0) -> dict[str, Any]:
    """One answer of GET /_tap/api/inflight (ApiError naming the fix)."""
    body = get_json(url, "/_tap/api/inflight", token, timeout)
    if not isinstance(body, dict) or "exchanges" not in body:
        raise ApiError(f"{url} did not answer as ollama-tap does; is it ollama-tap? (--url)")
    return body


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value < 60 else f"{int(value // 60)}m{int(value % 60):02d}s"


FIXED: Final = (("phase", 9, "left"), ("pos", 3, "right"), ("elapsed", 7, "right"),
                 ("out", 6, "right"), ("rate", 6, "right"))  # fmt: skip
"""The columns of one width: the phase is never cut, the figures are never cut."""
NAMES: Final = (("client", 8, 14, 0.3), ("model", 12, 28, 0.4), ("endpoint", 9, 20, 0.3))
"""The names (least before a column is dropped, most, share of what is left): shortened
with "…" down to their least, below it only when nothing is left to drop."""
DROPPED: Final = ("rate", "out", "endpoint", "pos")
"""What a narrow terminal goes without, in this order: decoration before who and what."""
GAP: Final = 2


def layout(width: int) -> list[tuple[str, int, str]]:
    """(column, width, justify) in order, adding up to at most `width` with the gaps."""
    gone: set[str] = set()
    while True:
        fixed = [(n, w, j) for n, w, j in FIXED if n not in gone]
        names = [c for c in NAMES if c[0] not in gone]
        left = width - sum(w for _, w, _ in fixed) - GAP * (len(fixed) + len(names) - 1)
        if left >= sum(c[1] for c in names) or len(gone) == len(DROPPED):
            break
        gone.add(DROPPED[len(gone)])
    share = sum(c[3] for c in names)
    floor = left >= sum(c[1] for c in names)
    sized = {
        n: max(least if floor else 3, min(most, int(left * part / share)))
        for n, least, most, part in names
    }
    order = ("client", "model", "endpoint", "phase", "pos", "elapsed", "out", "rate")
    widths = {**sized, **{n: w for n, w, _ in fixed}}
    justify = {n: j for n, _, j in fixed}
    return [(n, widths[n], justify.get(n, "left")) for n in order if n in widths]


def frame(
    snapshot: dict[str, Any] | None, url: str, problem: str | None = None, width: int = WIDTH
) -> Group:
    """One screen of `width` columns: a heading line and a table of the exchanges in flight,
    oldest first."""
    if snapshot is None:
        return Group(Text(f"ollama-tap top · {url}", style="bold"), Text(problem or "", "red"))
    waiting = ", ".join(f"{n} {m or '(none)'}" for m, n in sorted(snapshot["waiting"].items()))
    # The address last: in 80 columns it is what gets cut.
    head = f"{snapshot['in_flight']} in flight" + (f" · waiting: {waiting}" if waiting else "")
    head += f" · {url}"
    shown = layout(width)
    # A gap is the box's blank divider and one space of right padding (none at the edge).
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, GAP - 1, 0, 0))
    for name, size, justify in shown:
        table.add_column(
            name, width=size, min_width=size, max_width=size, no_wrap=True,
            overflow="ellipsis", justify=justify,  # type: ignore[arg-type]
        )  # fmt: skip
    for x in snapshot["exchanges"]:
        rate = "" if x["rate"] is None else f"{x['rate']:.1f}"
        position = "" if x["position"] is None else str(x["position"])
        style = "yellow" if x["phase"] == "waiting" else None
        model = f"{x['model']}→{x['box']}" if x.get("box") else x["model"]  # several boxes
        cells = {"client": x["client"], "model": model, "endpoint": x["endpoint"],
                 "phase": x["phase"], "pos": position, "elapsed": _seconds(x["elapsed"]),
                 "out": str(x["outputs"]), "rate": rate}  # fmt: skip
        # Text cells: names are printed as text, never read as rich markup.
        row = (Text(escaped(str(cells[name]))) for name, _, _ in shown)
        table.add_row(*row, style=style)
    if len(head) > width:
        head = head[: width - 1] + "…"
    parts: list[Any] = [Text(escaped(head), style="bold", no_wrap=True), table]
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
    width = min(Console().width, WIDTH)  # piped: 80, or COLUMNS
    console = Console(width=width)
    if args.once:
        try:
            console.print(frame(fetch(url, token), args.url, width=width))
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
            width = min(Console().width, WIDTH)  # the terminal may have been resized
            console.width = width
            live.update(frame(snapshot, args.url, problem, width), refresh=True)
            if _quit_pressed(REFRESH, keys):
                return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("top", help="what a proxy has in flight now, live (q quits)")
    add_options(p, DEFAULT_URL)
    p.add_argument("--once", action="store_true", help="print one frame and exit (for scripts)")
    p.set_defaults(func=cmd_top)

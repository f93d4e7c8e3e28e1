"""Instructions per request, counted by valgrind's callgrind: a figure of the proxy's own
work that does not move with the machine's load.

overhead.py's timings move by about ±10 % (CPU) and ±0.5 ms (TTFT) from run to run on 2
shared cores, which hides a change of a few percent. An instruction count stays within about
1 % from run to run for the same build and workload (hash seeds and timer wake-ups vary), so
two builds or configurations can be compared closely:

    python bench/instructions.py                          # ollama-tap as configured
    python bench/instructions.py --floor --tap rec-off:OLLAMA_TAP_RECORD=off
    python bench/instructions.py --tokens 20 --requests 100

Each target runs under callgrind (some 50× slower: a start-up takes most of a minute); the
upstream (bench/upstream.py) and this client run natively. After warm-up requests, N
requests are sent one at a time, each on a fresh connection, twice over:

- to the first token: the counters are zeroed before each request (QUIET_AFTER after the
  last one, once the recorder has written it) and dumped SETTLE after its first token
  arrived (the second comes FIRST_GAP later); reported is the median request, so the few a
  cyclic garbage collection falls into do not skew it;
- the whole exchange: counters zeroed before the N requests and dumped after them (and the
  recorder's writing of them); reported is the mean, collections included.

Each for the event loop's thread and for the other threads (the recorder's writer). Only
user space is counted: the kernel's share (about a quarter of a request's CPU time, much
the same for every relay) is not, and neither are cache misses, so an instruction is not a
fixed amount of time. Function-level detail: `callgrind_annotate --inclusive=yes FILE` on
the files kept with `--keep DIR` (`callgrind.T.P-NN`: target T, dump P, thread NN).

valgrind comes from Debian (`apt-get install valgrind`); it is installed when absent and we
are root.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from overhead import ROOT, add_checkout_option, debian_tool, free_port, tap_command, variants

WARMUP: Final = 20
QUIET: Final = {"OLLAMA_TAP_POLL_INTERVAL": "3600"}
"""The poller's rounds (three reads of Ollama every 10 s) are not per-request work: after
the one at start-up, none falls among the counted requests."""
FIRST_GAP: Final = 1.0
SETTLE: Final = 0.05
QUIET_AFTER: Final = 0.3
"""Seconds between two first-token requests: the recorder writes a record some 50 ms after
its exchange ended (FLUSH_EVERY), which would otherwise count as the next request's. With
FIRST_GAP, longer than the file's measurement period (MEASURE_EVERY, 1 s), so each write is
measured in its own round and no deferred measurement falls in a counted window."""
STARTUP_S: Final = 600.0
"""How long a target under callgrind may take to answer its first request: under a minute
on a quiet machine, several with many compiled modules (valgrind reads each one's symbols)
on a loaded one."""


def stream(
    port: int, tokens: int, delay: float = 0.0, first: Callable[[], None] | None = None
) -> None:
    """One streamed generate request on a fresh connection, read to its last chunk;
    `first` is called once its first token has arrived."""
    body = b'{"model":"bench","n":%d,"delay":%g}' % (tokens, delay)
    head = (
        b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (port, len(body))
    )
    with socket.create_connection(("127.0.0.1", port), timeout=STARTUP_S) as sock:
        sock.sendall(head + body)
        reply = b""
        while not reply.endswith(b"\r\n0\r\n\r\n"):
            data = sock.recv(65536)
            if not data:
                raise RuntimeError(f"the reply ended early: {reply[-200:]!r}")
            if first is not None and b'"response"' in reply + data:
                first()
                first = None
            reply += data
        if not reply.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"not a 200 reply: {reply[:200]!r}")


def wait_up(port: int) -> None:
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.5)


def control(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True)


def settle_and_dump(pid: int) -> None:
    start = time.monotonic()
    time.sleep(SETTLE)
    control(pid, "--dump")
    if time.monotonic() - start > FIRST_GAP * 0.8:
        # The second token may have been relayed before the dump: its work would count.
        raise RuntimeError("callgrind_control answered too slowly to count the first token")


def counted(out: Path, part: int) -> tuple[int, int]:
    """(event loop thread, other threads) instructions in one dump."""
    loop = other = 0
    for path in out.parent.glob(f"{out.name}.{part}-*"):
        summary = re.search(r"^summary: (\d+)", path.read_text(errors="replace"), re.M)
        n = int(summary.group(1)) if summary else 0
        if path.name.endswith("-01"):
            loop += n
        else:
            other += n
    return loop, other


def median_counts(out: Path, parts: range) -> tuple[int, int]:
    """The median per dump of each thread group: one dump per request, and the median
    leaves out the few a cyclic garbage collection fell into (it costs some 600,000
    instructions, about one request in twenty here)."""
    counts = [counted(out, part) for part in parts]
    return (
        int(statistics.median(loop for loop, _ in counts)),
        int(statistics.median(other for _, other in counts)),
    )


def measure(
    name: str,
    command: list[str],
    env: dict[str, str],
    port: int,
    out: Path,
    args: argparse.Namespace,
    root: Path = ROOT,
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(first token, whole exchange) counts: each as (event loop, other threads)."""
    proc = subprocess.Popen(
        command, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    n = args.requests
    try:
        wait_up(port)
        for _ in range(WARMUP):
            stream(port, args.tokens)
        time.sleep(1.0)  # the writer thread's batch of the warm-up requests
        # Up to the first token: the second comes FIRST_GAP later, and the count stops
        # SETTLE after the first arrived (the proxy's work right after its write counts).
        firsts = 0 if args.whole_only else n
        for _ in range(firsts):
            time.sleep(QUIET_AFTER)
            control(proc.pid, "--zero")
            stream(port, 2, FIRST_GAP, lambda: settle_and_dump(proc.pid))
        time.sleep(1.0)
        control(proc.pid, "--zero")
        for _ in range(n):
            stream(port, args.tokens, args.delay)
        time.sleep(1.0)  # the writer thread's batch of the measured ones
        control(proc.pid, "--dump")
        loop, other = counted(out, firsts + 1)
        first = median_counts(out, range(1, firsts + 1)) if firsts else (0, 0)
        return first, (loop // n, other // n)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"  {name}: measured", file=sys.stderr)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=1, help="tokens per stream (default 1)")
    parser.add_argument(
        "--delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="between two tokens of a counted exchange (default 0: the proxy, slowed by "
        "callgrind, reads several at once, as in a burst; 0.05 gives each token a read of "
        "its own, as a paced stream does)",
    )
    parser.add_argument(
        "--tap",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE,...",
        help="an extra ollama-tap variant with this environment (repeatable)",
    )
    add_checkout_option(parser)
    parser.add_argument(
        "--whole-only",
        action="store_true",
        help="count only whole exchanges: the first-token count needs callgrind_control to "
        "answer within FIRST_GAP, which it may not on a loaded machine",
    )
    parser.add_argument("--floor", action="store_true", help="also count bench/floor.py")
    parser.add_argument("--keep", type=Path, help="keep callgrind's files in this directory")
    args = parser.parse_args()
    if args.requests < 1 or args.tokens < 1 or args.delay < 0:
        parser.error("--requests and --tokens must be at least 1, --delay not negative")
    return args


def main() -> int:
    args = parse_args()
    grind = debian_tool("/usr/bin/valgrind", "valgrind")
    if grind is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ollama-tap-instr-"))
    files = args.keep or tmp
    files.mkdir(parents=True, exist_ok=True)
    for stale in files.glob("callgrind.*"):  # an earlier run's dumps would be counted
        stale.unlink()
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "bench" / "upstream.py"), str(up_port)])
    rows: list[tuple[str, tuple[int, int], tuple[int, int]]] = []
    try:
        wait_up(up_port)
        targets: list[tuple[str, list[str], dict[str, str], int, Path]] = []
        if args.floor:
            port = free_port()
            script = str(ROOT / "bench" / "floor.py")
            targets.append(
                (
                    "python floor",
                    [sys.executable, script, str(port), str(up_port)],
                    dict(os.environ),
                    port,
                    ROOT,
                )
            )
        for name, extra in variants(args.tap).items():
            command, env, port = tap_command(name, up_port, tmp, {**QUIET, **extra})
            targets.append((name, command, env, port, ROOT))
        for name, root in args.checkout:
            command, env, port = tap_command(name, up_port, tmp, QUIET, root)
            targets.append((name, command, env, port, root))
        for i, (name, command, env, port, root) in enumerate(targets):
            out = files / f"callgrind.{i}"
            grinding = [
                grind,
                "--tool=callgrind",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}",
            ]
            first, whole = measure(name, [*grinding, *command], env, port, out, args, root)
            rows.append((name, first, whole))
    finally:
        upstream.send_signal(signal.SIGTERM)
        upstream.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.requests
    print(f"\ninstructions per request ({n} requests one at a time, each on a fresh connection)")
    paced = f", {args.delay:g} s apart" if args.delay else ""
    title = f"whole exchange, {args.tokens} token(s){paced}: mean"
    print(f"  {'':<16}{'to the first token: median':^27}  {title:^27}")
    head = f"{'event loop':>13}{'other threads':>14}"
    print(f"  {'target':<16}{head}  {head}")
    for name, (loop, other), (whole_loop, whole_other) in rows:
        print(f"  {name:<16}{loop:>13,}{other:>14,}  {whole_loop:>13,}{whole_other:>14,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

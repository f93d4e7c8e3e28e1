"""What the proxy costs: direct vs nginx vs ollama-tap, side by side, rounds interleaved.

Three processes do the work: a minimal Ollama-shaped streaming upstream (NDJSON lines, as
cheap as it can be so it does not skew the others), the relay under test (nothing, nginx
with `proxy_buffering off`, or `ollama-tap serve`), and this load generator. For each
workload the script runs the same streams against each target in turn, several rounds, and
reports client-seen time to first token (TTFT) and the relay's CPU time per relayed chunk
(user+system of its processes, read from /proc), with ratios against nginx.

    python bench/overhead.py                 # all workloads, 3 rounds
    python bench/overhead.py --rounds 5 --json results.json
    python bench/overhead.py --tap metrics-off:OLLAMA_TAP_METRICS=false \
                             --tap recorder-off:OLLAMA_TAP_RECORD=off   # variants side by side
    python bench/overhead.py --floor --only light   # and a minimal Python relay (floor.py)
    python bench/overhead.py --floor --floor-busy 150 --floor-busy 150:after --only light
    python bench/overhead.py --pin --only light     # relays on a core of their own
    python bench/overhead.py --otel                 # and ollama-tap exporting spans (OTLP)

By default the three processes share every core, so under a burst a relay's CPU is taken
from the load generator and the upstream too: the median request of a burst waits for most
of the burst's work, and each microsecond of a relay's per-request CPU adds about ten to the
added TTFT p50 (bench/floor.py with 150 µs more per request: +1.6 ms). With `--pin` the
relay under test gets the last core to itself and the load generator and upstream share the
others (on 2 cores: one), as when Ollama and its clients do not compete with the proxy for
its core. The added TTFT is then mostly the relay's own latency; on 2 cores the load
generator and upstream, sharing one, also spread a burst's requests over a few milliseconds,
and "direct" does without the core the relays get (its added figures are not comparable
between the two set-ups; the gap to nginx is).

nginx comes from Debian (`apt-get install nginx`); it is installed when absent and we are
root, otherwise its column is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp

ROOT = Path(__file__).resolve().parents[1]

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream ollama {{ server 127.0.0.1:{up}; keepalive 128; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://ollama;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host localhost:11434;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes (all threads), in seconds, to the nanosecond.

    /proc/PID/schedstat counts on-CPU nanoseconds; /proc/PID/stat's clock ticks (10 ms)
    are far too coarse for a few thousand chunks.
    """
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total / 1e9


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@dataclass
class Target:
    name: str
    url: str
    pids: list[int] = field(default_factory=list)


@dataclass
class Workload:
    name: str
    streams: int
    """Streams at once."""
    tokens: int
    delay: float
    """Seconds between tokens (0: as fast as the upstream turns, one token per turn)."""
    waves: int = 1
    """How many times the batch of streams runs, one after the other, per round."""
    flood: bool = False
    """The upstream writes each whole stream in one go (see bench/upstream.py)."""
    staggered: bool = False
    """Stream i starts i/streams of a token period late, on a connection opened beforehand,
    as independent clients' requests arrive; otherwise all start at once, and each round's
    streams open fresh connections together (the worst case for a relay)."""
    cpu_target: float | None = None
    """The most CPU per chunk ollama-tap may cost, as a multiple of nginx's."""
    ttft_target: tuple[float, float] | None = None
    """The most ollama-tap's added TTFT p50 and p99 may exceed nginx's, in ms."""


# The performance targets (docs/performance.md): checked and printed after the figures.
LIGHT_TTFT: Final = (0.3, 2.0)
WORKLOADS = [
    Workload("single (one stream at a time, 5 ms/token)", 1, 20, 0.005, waves=40),
    Workload("burst (500 tokens asap, 8 at once)", 8, 500, 0.0, cpu_target=2.0),
    Workload(
        "flood (500 tokens written in one go, 8 at once; not a target)", 8, 500, 0.0, flood=True
    ),
    Workload("paced (5 ms/token, 64 at once)", 64, 200, 0.005, cpu_target=2.0),
    Workload("light (5 ms/token, 8 at once)", 8, 100, 0.005, ttft_target=LIGHT_TTFT),
    Workload(
        "light, staggered (5 ms/token, 8 streams)",
        8,
        100,
        0.005,
        waves=4,
        staggered=True,
        ttft_target=LIGHT_TTFT,
    ),
]
STARTUP_TARGET_S: Final = 1.0


async def wait_up(url: str, tries: int = 200) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(tries):
            try:
                async with s.get(url + "/") as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


@dataclass
class Trace:
    """`--trace`: where each target's TTFT goes. The upstream logs when each request reached
    its handler and when it wrote the first token (bench/upstream.py, BENCH_TRACE); with the
    client's own send and first-line times (the same monotonic clock in every process), each
    request splits into the way in (client to upstream handler), the upstream's own time,
    and the way out (the upstream's first write to the client's first line)."""

    log: Path
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Request id: the client's send and first-line times."""

    def split(self, prefix: str) -> dict[str, float]:
        """Median ms of each part, over the requests whose id starts with `prefix`."""
        upstream: dict[str, tuple[float, float]] = {}
        for line in self.log.read_text().splitlines():
            rid, *stamps = line.split()
            upstream[rid] = (float(stamps[0]), float(stamps[1]))
        parts: list[tuple[float, float, float]] = []
        for rid, (sent, first) in self.sent.items():
            if rid.startswith(prefix) and rid in upstream:
                reached, wrote = upstream[rid]
                parts.append((reached - sent, wrote - reached, first - wrote))
        if not parts:
            return {}  # no request reached the upstream with its id (a relay rewrote it)
        return {
            f"{name}_ms": statistics.median(p[k] for p in parts) * 1000
            for k, name in enumerate(("in", "upstream", "out"))
        }


TRACE: Trace | None = None


async def one_stream(
    session: aiohttp.ClientSession, url: str, w: Workload, i: int = 0, rid: str | None = None
) -> tuple[float, int]:
    if w.staggered:
        await asyncio.sleep(i * w.delay / w.streams)
    start = time.perf_counter()
    ttft = -1.0
    lines = 0
    body = {"model": "bench", "n": w.tokens, "delay": w.delay, "flood": w.flood}
    if TRACE is not None and rid is not None:
        body["id"] = rid
    async with session.post(url + "/api/generate", json=body) as resp:
        async for _ in resp.content:
            if ttft < 0:
                ttft = time.perf_counter() - start
            lines += 1
    if TRACE is not None and rid is not None:
        TRACE.sent[rid] = (start, start + ttft)
    return ttft, lines


async def run_round(target: Target, w: Workload, tag: str) -> tuple[list[float], int, float]:
    """One round of `w` against `target`; its requests' ids begin with `tag` (`--trace`)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        warm = Workload("warm", 1, 5, 0)
        await asyncio.gather(
            *(one_stream(session, target.url, warm) for _ in range(w.streams if w.staggered else 1))
        )
        before = cpu_seconds(target.pids)
        results = []
        for wave in range(w.waves):
            results += await asyncio.gather(
                *(
                    one_stream(session, target.url, w, i, f"{tag}{wave}|{i}")
                    for i in range(w.streams)
                )
            )
        cpu = cpu_seconds(target.pids) - before
    ttfts = [r[0] for r in results]
    chunks = sum(r[1] for r in results)
    return ttfts, chunks, cpu


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def debian_tool(path: str, *packages: str) -> str | None:
    """The program at `path` (or found on PATH by its name), installed from the first of
    Debian's `packages` that installs when it is absent and we are root; None without it."""
    found = shutil.which(Path(path).name) or (path if Path(path).exists() else None)
    if found is None and os.geteuid() == 0:
        for package in packages:
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", package],
                check=False,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            found = shutil.which(Path(path).name) or (path if Path(path).exists() else None)
            if found is not None:
                break
    return found


Pin = Callable[[], None] | None
"""Run in each relay's process before it starts (`--pin`): its core."""


def split_cores(pin: bool) -> Pin:
    """With `pin`, this process (and the upstream it starts) keeps every core but the last,
    and the returned function gives a relay's process the last one; else nothing changes."""
    if not pin:
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--pin needs at least two cores")
    relay_core = cores[-1]
    os.sched_setaffinity(0, set(cores[:-1]))
    return lambda: os.sched_setaffinity(0, {relay_core})


def start_nginx(
    up_port: int, tmp: Path, pin: Pin = None
) -> tuple[subprocess.Popen[bytes], Target] | None:
    nginx = debian_tool("/usr/sbin/nginx", "nginx-light", "nginx")
    if nginx is None:
        print("nginx not available; its column is skipped", file=sys.stderr)
        return None
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp, up=up_port, port=port))
    proc = subprocess.Popen(
        [nginx, "-c", str(conf), "-p", str(tmp)], stderr=subprocess.DEVNULL, preexec_fn=pin
    )
    return proc, Target("nginx", f"http://127.0.0.1:{port}", [proc.pid])


ADMIN_TOKEN = "bench-admin-token-0123"
"""The admin token of every `ollama-tap serve` a benchmark starts."""


def tap_command(
    name: str, up_port: int, tmp: Path, extra_env: dict[str, str], root: Path = ROOT
) -> tuple[list[str], dict[str, str], int]:
    """The command line and environment of an `ollama-tap serve`, and the port it will use;
    `root`: another checkout, run with its own .venv (run the command with cwd=root)."""
    port = free_port()
    env = {
        **os.environ,
        "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN,
        "OLLAMA_TAP_DB": str(tmp / f"{name}.db"),
        "OLLAMA_TAP_LOG_LEVEL": "warning",
        **extra_env,
    }
    python = sys.executable if root == ROOT else str(root / ".venv" / "bin" / "python")
    command = [
        python,
        "-m",
        # A build from before the rename (a "before" tree) has the package as `proxy`.
        "ollama_tap" if (root / "ollama_tap").is_dir() else "proxy",
        "serve",
        "--port",
        str(port),
        "--upstream",
        f"http://127.0.0.1:{up_port}",
    ]
    return command, env, port


def start_tap(
    name: str,
    up_port: int,
    tmp: Path,
    extra_env: dict[str, str],
    pin: Pin = None,
    root: Path = ROOT,
) -> tuple[subprocess.Popen[bytes], Target]:
    command, env, port = tap_command(name, up_port, tmp, extra_env, root)
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pin,
    )
    return proc, Target(name, f"http://127.0.0.1:{port}", [proc.pid])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--tap",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE,...",
        help="an extra ollama-tap variant with this environment (repeatable), "
        "e.g. metrics-off:OLLAMA_TAP_METRICS=false",
    )
    add_checkout_option(parser)
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure bench/floor.py, the least a Python relay of these streams can do "
        "(a reference point: what ollama-tap costs beyond it is what its work costs)",
    )
    parser.add_argument(
        "--floor-busy",
        action="append",
        default=[],
        metavar="US[:after]",
        help="also measure the floor with US microseconds of extra work per request, after "
        "its send (or after its first token, with :after); repeatable",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="give the relays the last core to themselves; the load generator and the "
        "upstream keep the others (see above)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also split each TTFT into the way in, the upstream's own time and the way "
        "out (median ms), from timestamps the upstream logs",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="also measure the variant `otel`: ollama-tap exporting every exchange as spans "
        "to an OTLP/HTTP sink (bench/otlp_sink.py) in a process of its own",
    )
    parser.add_argument(
        "--only", metavar="WORD", help="run only the workloads whose name contains WORD"
    )
    return parser.parse_args()


def add_checkout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkout",
        action="append",
        default=[],
        type=checkout,
        metavar="NAME=DIR",
        help="also measure another checkout of ollama-tap, with its own .venv built there "
        "(`make .venv/.compiled` in DIR): a build before a change, side by side (repeatable)",
    )


def checkout(spec: str) -> tuple[str, Path]:
    name, _, folder = spec.partition("=")
    root = Path(folder).resolve()
    if not name or not (root / ".venv" / "bin" / "python").exists():
        raise argparse.ArgumentTypeError(f"{spec}: want NAME=DIR, a checkout with .venv built")
    return name, root


def variants(specs: list[str]) -> dict[str, dict[str, str]]:
    """`ollama-tap` as it ships, plus each `NAME:VAR=VALUE,...` given."""
    out: dict[str, dict[str, str]] = {"ollama-tap": {}}
    for spec in specs:
        name, _, env = spec.partition(":")
        out[name] = dict(pair.split("=", 1) for pair in env.split(",") if pair)
    return out


async def bring_up(targets: list[Target], tap: Target, spawned: float) -> float:
    """Wait for every relay; returns ollama-tap's start-up time (spawn to first reply)."""
    await wait_up(targets[0].url)
    await wait_up(tap.url)
    startup = time.perf_counter() - spawned
    for t in targets[1:]:
        await wait_up(t.url)
        t.pids += children(t.pids[0])
    return startup


def main() -> int:
    args = parse_args()
    taps = variants(args.tap)
    tmp = Path(tempfile.mkdtemp(prefix="ollama-tap-bench-"))
    pin = split_cores(args.pin)
    up_port = free_port()
    upstream = [sys.executable, str(ROOT / "bench" / "upstream.py"), str(up_port)]
    up_env = dict(os.environ)
    if args.trace:
        global TRACE
        TRACE = Trace(tmp / "trace.log")
        up_env["BENCH_TRACE"] = str(TRACE.log)
    procs: list[subprocess.Popen[bytes]] = [subprocess.Popen(upstream, env=up_env)]
    targets = [Target("direct", f"http://127.0.0.1:{up_port}")]
    try:
        if args.otel:
            sink = free_port()
            procs.append(
                subprocess.Popen([sys.executable, str(ROOT / "bench" / "otlp_sink.py"), str(sink)])
            )
            taps["otel"] = {"OLLAMA_TAP_OTLP_ENDPOINT": f"http://127.0.0.1:{sink}"}
        if not args.no_nginx and (started := start_nginx(up_port, tmp, pin)):
            procs.append(started[0])
            targets.append(started[1])
        floors = ([""] if args.floor else []) + args.floor_busy
        for busy in floors:
            port = free_port()
            script = str(ROOT / "bench" / "floor.py")
            command = [sys.executable, script, str(port), str(up_port), busy]
            procs.append(subprocess.Popen(command, preexec_fn=pin))
            name = f"floor +{busy}" if busy else "python floor"
            targets.append(Target(name, f"http://127.0.0.1:{port}", [procs[-1].pid]))
        spawned = time.perf_counter()
        for name, env in taps.items():
            proc, target = start_tap(name, up_port, tmp, env, pin)
            procs.append(proc)
            targets.append(target)
        for name, root in args.checkout:
            proc, target = start_tap(name, up_port, tmp, {}, pin, root)
            procs.append(proc)
            targets.append(target)
        tap = next(t for t in targets if t.name == "ollama-tap")
        startup = asyncio.run(bring_up(targets, tap, spawned))
        report = asyncio.run(measure(targets, args.rounds, args.only))
        report["tap_startup_s"] = startup
        report["tap_rss_mb"] = rss_mb(tap.pids)
        report["targets"] = check_targets(report)
        report["variants"] = taps
        report["pinned"] = args.pin
        print_report(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


async def measure(targets: list[Target], rounds: int, only: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"workloads": []}
    for wi, w in enumerate(WORKLOADS):
        if only and only not in w.name:
            continue
        ttfts: dict[str, list[float]] = {t.name: [] for t in targets}
        p50s: dict[str, list[float]] = {t.name: [] for t in targets}
        cpu: dict[str, float] = {t.name: 0.0 for t in targets}
        chunks: dict[str, int] = {t.name: 0 for t in targets}
        for r in range(rounds):
            for ti, t in enumerate(targets):  # interleaved, so drift hits every target alike
                tt, n, c = await run_round(t, w, f"{wi}|{ti}|{r}|")
                ttfts[t.name] += tt
                p50s[t.name].append(pct(tt, 0.5) * 1000)
                chunks[t.name] += n
                cpu[t.name] += c
        row: dict[str, Any] = {"workload": w.name, "targets": {}}
        for ti, t in enumerate(targets):
            row["targets"][t.name] = {
                "ttft_p50_ms": pct(ttfts[t.name], 0.5) * 1000,
                "ttft_p99_ms": pct(ttfts[t.name], 0.99) * 1000,
                "ttft_p50_ms_by_round": p50s[t.name],
                "cpu_us_per_chunk": cpu[t.name] / max(chunks[t.name], 1) * 1e6 if t.pids else None,
                "chunks": chunks[t.name],
            }
            if TRACE is not None:
                row["targets"][t.name].update(TRACE.split(f"{wi}|{ti}|"))
        out["workloads"].append(row)
    return out


def print_report(report: dict[str, Any]) -> None:
    head = ("target", "TTFT p50", "p99", "+p50", "+p99", "CPU µs/chunk", "× nginx")
    if report["pinned"]:
        print("relays on a core of their own; load generator and upstream on the others")
    else:
        print("relays, load generator and upstream sharing every core")
    for row in report["workloads"]:
        print(f"\n{row['workload']}")
        print("  {:<16} {:>9} {:>8} {:>7} {:>7} {:>13} {:>8}".format(*head))
        data = row["targets"]
        direct = data["direct"]
        nginx_cpu = data.get("nginx", {}).get("cpu_us_per_chunk")
        for name, d in data.items():
            cpu = d["cpu_us_per_chunk"]
            split = "   in {in_ms:.2f} / upstream {upstream_ms:.2f} / out {out_ms:.2f} ms"
            print(
                "  {:<16} {:>7.2f}ms {:>6.2f}ms {:>+7.2f} {:>+7.2f} {:>13} {:>8}".format(
                    name,
                    d["ttft_p50_ms"],
                    d["ttft_p99_ms"],
                    d["ttft_p50_ms"] - direct["ttft_p50_ms"],
                    d["ttft_p99_ms"] - direct["ttft_p99_ms"],
                    "-" if cpu is None else f"{cpu:.1f}",
                    f"{cpu / nginx_cpu:.2f}" if cpu and nginx_cpu else "-",
                )
                + (split.format(**d) if "in_ms" in d else "")
            )
    print(f"\nollama-tap start-up to first reply: {report['tap_startup_s'] * 1000:.0f} ms")
    print(f"ollama-tap RSS after the run: {report['tap_rss_mb']:.0f} MB")
    print("\ntargets (2,000 held streams in <= 150 MB: bench/hold.py)")
    for t in report["targets"]:
        mark = "met" if t["met"] else "NOT met"
        print(f"  {t['target']:<52} {t['measured']:>10}  {mark:<7}  {t.get('rounds', '')}")


def check_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the workloads that have one, against this run's figures (skipped
    without nginx, which they are relative to)."""
    out: list[dict[str, Any]] = []
    workloads = {w.name: w for w in WORKLOADS}
    for row in report["workloads"]:
        w, data = workloads[row["workload"]], row["targets"]
        if "nginx" not in data:
            continue
        tap, nginx, direct = data["ollama-tap"], data["nginx"], data["direct"]
        short = w.name.split(" (")[0]
        if w.cpu_target is not None:
            ratio = tap["cpu_us_per_chunk"] / nginx["cpu_us_per_chunk"]
            out.append(
                {
                    "target": f"{short}: CPU per chunk <= {w.cpu_target:g}x nginx's",
                    "measured": f"{ratio:.2f}x",
                    "met": ratio <= w.cpu_target,
                }
            )
        for stat, limit in zip(("p50", "p99"), w.ttft_target or (), strict=False):
            key = f"ttft_{stat}_ms"
            over = (tap[key] - direct[key]) - (nginx[key] - direct[key])
            target = {
                "target": f"{short}: added TTFT {stat} <= nginx's + {limit:g} ms",
                "measured": f"{over:+.2f} ms",
                "met": over <= limit,
            }
            if stat == "p50":
                # The same gap round by round: how far one run's figure can be trusted on a
                # machine whose 2 cores client, upstream and relay share.
                key = "ttft_p50_ms_by_round"
                gaps = [a - b for a, b in zip(tap[key], nginx[key], strict=True)]
                target["rounds"] = f"rounds {min(gaps):+.2f} to {max(gaps):+.2f} ms"
            out.append(target)
    startup = report["tap_startup_s"]
    out.append(
        {
            "target": f"start-up to first reply <= {STARTUP_TARGET_S:g} s",
            "measured": f"{startup:.2f} s",
            "met": startup <= STARTUP_TARGET_S,
        }
    )
    return out


if __name__ == "__main__":
    sys.exit(main())

"""The proxy's peak memory under the OpenTelemetry loads of the security review (F1).

    python bench/otel_memory.py [--checkout before=DIR] [--baseline] [--scale 0.5] [--json F]

Two loads, each against a fresh `ollama-tap serve` (loopback, so `full` recording):

- `metrics`: `--otel-metrics` with a collector that takes everything; requests whose `model`
  is a made-up name of 100 KB (then 1 MB), each one new. Every distinct name used to be a
  metric series for good.
- `spans`: a collector that accepts connections and never answers (a black hole); 1,200
  requests with a 1 MB prompt, four at a time (the review sent 250: these run long enough to
  fill the old bound, 2,048 spans whatever their size).

Prints the proxy's resident memory at start and its peak (VmHWM) per load and checkout,
and the spans and points the proxy counted as lost (ollama_tap_otel_dropped_total).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from overhead import ROOT, add_checkout_option, free_port, rss_mb, tap_command, wait_up

KIB = 1024


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / KIB
    return 0.0


def black_hole() -> tuple[socket.socket, int]:
    """A collector that accepts connections and never answers (the review's)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            held.append(conn)  # never read, never answered

    threading.Thread(target=accept, daemon=True).start()
    return sock, int(sock.getsockname()[1])


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(f"{url}/api/generate", json=body) as resp:
        await resp.read()


async def metrics_load(url: str, scale: float) -> int:
    sent = 0
    async with aiohttp.ClientSession() as s:
        for count, size in ((int(300 * scale), 100 * KIB), (int(150 * scale), 1000 * KIB)):
            for _ in range(count):
                model = f"missing{sent}-" + "y" * size
                await post(s, url, {"model": model, "prompt": "x", "n": 1, "stream": False})
                sent += 1
    return sent


async def spans_load(url: str, scale: float) -> int:
    prompt = "y" * 1_000_000
    batches = int(1200 * scale) // 4
    async with aiohttp.ClientSession() as s:
        for _ in range(batches):
            body = {"model": "bench", "prompt": prompt, "n": 1, "stream": False}
            await asyncio.gather(*(post(s, url, body) for _ in range(4)))
    return 4 * batches


async def dropped(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("ollama_tap_otel_") and "dropped" in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def run(
    name: str,
    root: Path,
    load: str,
    scale: float,
    up_port: int,
    otel: bool = True,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="ollama-tap-otel-mem-"))
    sink: subprocess.Popen[bytes] | None = None
    hole: socket.socket | None = None
    env: dict[str, str] = dict(extra or {})
    if otel and load == "metrics":
        sink_port = free_port()
        sink = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "otlp_sink.py"), str(sink_port)]
        )
        env["OLLAMA_TAP_OTEL_METRICS"] = "true"
        env["OLLAMA_TAP_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink_port}"
    elif otel:
        hole, sink_port = black_hole()
        env["OLLAMA_TAP_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink_port}"
    command, full_env, port = tap_command(f"{name}-{load}", up_port, tmp, env, root)
    with (tmp / "tap.log").open("wb") as log:
        tap = subprocess.Popen(command, env=full_env, cwd=root, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_up(url, tries=1200))  # a loaded machine imports slowly
        time.sleep(1)
        start = rss_mb([tap.pid])
        began = time.monotonic()
        sent = asyncio.run(metrics_load(url, scale) if load == "metrics" else
                           spans_load(url, scale))  # fmt: skip
        time.sleep(3)  # a few export rounds after the load
        return {
            "checkout": name if otel else f"{name}, no OTel",
            "load": load,
            "requests": sent,
            "seconds": round(time.monotonic() - began, 1),
            "rss_start_mb": round(start, 1),
            "rss_end_mb": round(rss_mb([tap.pid]), 1),
            "peak_mb": round(peak_mb(tap.pid), 1),
            "dropped": asyncio.run(dropped(url)),
        }
    finally:
        tap.terminate()
        tap.wait(60)
        if sink is not None:
            sink.terminate()
            sink.wait(30)
        if hole is not None:
            hole.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_checkout_option(parser)
    parser.add_argument("--scale", type=float, default=1.0, help="of the review's counts")
    parser.add_argument("--load", choices=["metrics", "spans"], action="append")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--baseline", action="store_true", help="also the same load without OTel export"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="VAR=VALUE",
        help="for every ollama-tap, e.g. OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=1048576",
    )  # fmt: skip
    args = parser.parse_args()
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "bench" / "upstream.py"), str(up_port)])
    results = []
    try:
        asyncio.run(wait_up(f"http://127.0.0.1:{up_port}"))
        for load in args.load or ["metrics", "spans"]:
            runs = [(name, root, True) for name, root in [("this", ROOT), *args.checkout]]
            if args.baseline:
                runs.append(("this", ROOT, False))
            for name, root, otel in runs:
                extra = dict(item.split("=", 1) for item in args.env)
                result = run(name, root, load, args.scale, up_port, otel, extra)
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        upstream.terminate()
        upstream.wait(30)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

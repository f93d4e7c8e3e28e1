"""Three Ollama boxes behind one front door: nginx round-robin against ollama-tap's routing.

Three fake Ollamas (tests/support/fake_ollama with Ollama's scheduler rules: one model
resident at a time, `OLLAMA_MAX_LOADED_MODELS=1`, each load taking `--load-seconds` of real
time) serve three models; four clients each ask for the three models in turn, `--requests`
requests each, all four at once. In front of the boxes, one after the other on fresh boxes:

- nginx from Debian with an `upstream` block of the three (round-robin, its default), as
  bench/overhead.py runs it;
- `ollama-tap serve --upstream a=URL --upstream b=URL --upstream c=URL`, which routes each
  request to a box where its model is resident.

Reported side by side: the loads the boxes made (each fake counts its own), per box and in
all, and the TTFT the clients saw (p50, p95, max). Round-robin sends a model to a box where
another one is resident about two times in three, so most requests wait for a load; routing
by residency loads each model once.

    make bench-boxes                                                   # both front doors
    make bench-boxes ARGS="--only nginx --requests 6 --json boxes.json"
    .venv/bin/python bench/boxes.py --load-seconds 8                  # larger models
    .venv/bin/python bench/boxes.py --tap-tree /tmp/boxes-src         # another build's tap

The fakes run in this process, on its event loop, as the clients do: they sleep through
loads and write a few lines, so at these time scales (seconds) their CPU does not matter.
ollama-tap's half needs a build that takes `--upstream NAME=URL` (several boxes); an older
one refuses the flag, and its column says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead import ROOT, debian_tool, free_port, pct, tap_command, wait_up

from tests.support.fake_ollama.models import new_model
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.fake_ollama.server import FakeOllama

BOXES: Final = ("a", "b", "c")
MODELS: Final = ("llama3.2:latest", "qwen3:8b", "gemma3:4b")
"""The fake's two chat models and a third made for the run."""
CLIENTS: Final = 4
TOKENS: Final = [f" t{i}" for i in range(20)]
NGINX_CONF: Final = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream ollama {{ {servers} keepalive 16; }}
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


@dataclass
class Box:
    """One fake Ollama with the scheduler's rules, serving on a port of its own."""

    name: str
    fake: FakeOllama
    runner: web.AppRunner
    url: str

    @property
    def loads(self) -> list[str]:
        scheduler = self.fake.scheduler
        assert scheduler is not None
        return scheduler.loads


async def start_box(name: str, load_seconds: float) -> Box:
    fake = FakeOllama()
    third = new_model(MODELS[2])
    fake.models[third.name] = third
    fake.scheduler = Scheduler(fake, max_loaded=1, load_seconds=load_seconds)
    fake.script.tokens = list(TOKENS)
    fake.script.prefill_delay = 0.05
    fake.script.token_delay = 0.02
    runner = web.AppRunner(fake.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    fake.url = f"http://127.0.0.1:{port}"
    return Box(name, fake, runner, fake.url)


async def one_request(session: aiohttp.ClientSession, url: str, model: str) -> float:
    """One streamed generate; the client-seen time to its first output line."""
    start = time.perf_counter()
    ttft = -1.0
    body = {"model": model, "prompt": "Why is the sky blue?", "stream": True}
    async with session.post(url + "/api/generate", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}: {(await resp.text())[:200]}")
        async for _ in resp.content:
            if ttft < 0:
                ttft = time.perf_counter() - start
    return ttft


async def client(session: aiohttp.ClientSession, url: str, c: int, requests: int) -> list[float]:
    """Client `c` asks for the three models in turn, starting at its own one."""
    return [await one_request(session, url, MODELS[(c + k) % len(MODELS)]) for k in range(requests)]


async def run_clients(url: str, requests: int) -> tuple[list[float], float]:
    """Every client at once; their TTFTs and the wall time of the whole run."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.perf_counter()
        runs = await asyncio.gather(*(client(session, url, c, requests) for c in range(CLIENTS)))
        return [t for run in runs for t in run], time.perf_counter() - start


def start_nginx(boxes: list[Box], tmp: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    nginx = debian_tool("/usr/sbin/nginx", "nginx-light", "nginx")
    if nginx is None:
        return None
    port = free_port()
    servers = " ".join(f"server {b.url.removeprefix('http://')};" for b in boxes)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp, servers=servers, port=port))
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp)], stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def start_tap(
    boxes: list[Box], tmp: Path, tree: Path | None
) -> tuple[subprocess.Popen[bytes], str]:
    """`ollama-tap serve` in front of the boxes: this checkout's, or the package in `tree`
    (a source tree run with this interpreter: `python -m` puts its directory first)."""
    command, env, port = tap_command("boxes", 0, tmp, {"OLLAMA_TAP_POLL_INTERVAL": "0.5"})
    at = command.index("--upstream")
    command[at : at + 2] = [arg for b in boxes for arg in ("--upstream", f"{b.name}={b.url}")]
    proc = subprocess.Popen(
        command, env=env, cwd=tree or ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return proc, f"http://127.0.0.1:{port}"


async def tags_listed(url: str) -> None:
    """Until the front door lists every model (ollama-tap: each box polled once)."""
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            async with s.get(url + "/api/tags") as r:
                names = {m["name"] for m in (await r.json()).get("models", [])}
            if names >= set(MODELS):
                return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never listed {', '.join(MODELS)}")


async def front_door(
    name: str, requests: int, load_seconds: float, tree: Path | None = None
) -> dict[str, Any]:
    """One front door in front of three fresh boxes: its figures, or why it did not run."""
    boxes = [await start_box(b, load_seconds) for b in BOXES]
    proc: subprocess.Popen[bytes] | None = None
    try:
        with tempfile.TemporaryDirectory(prefix=f"boxes-{name}-") as tmp:
            if name == "nginx":
                started = start_nginx(boxes, Path(tmp))
                if started is None:
                    return {"skipped": "nginx is not installed (apt-get install nginx-light)"}
                proc, url = started
            else:
                proc, url = start_tap(boxes, Path(tmp), tree)
            try:
                await wait_up(url)
                await tags_listed(url)
            except (RuntimeError, aiohttp.ClientError):
                return {"skipped": _why_down(proc)}
            ttfts, wall = await run_clients(url, requests)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        for box in boxes:
            await box.runner.cleanup()
    loads = {b.name: len(b.loads) for b in boxes}
    return {
        "requests": len(ttfts),
        "loads": sum(loads.values()),
        "loads_per_box": loads,
        "models_per_box": {b.name: sorted(set(b.loads)) for b in boxes},
        "ttft_p50_s": pct(ttfts, 0.50),
        "ttft_p95_s": pct(ttfts, 0.95),
        "ttft_max_s": max(ttfts),
        "wall_s": wall,
    }


def _why_down(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        return "did not come up, or never listed the models"
    err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
    last = err.splitlines()[-1] if err else f"exit status {proc.returncode}"
    return f"exited: {last} (several boxes need a build with --upstream NAME=URL)"


def print_report(report: dict[str, Any]) -> None:
    cfg = report["config"]
    if cfg.get("tap_tree"):
        print(f"ollama-tap from {cfg['tap_tree']}")
    print(
        f"{CLIENTS} clients x {cfg['requests']} requests, models in turn; "
        f"{len(BOXES)} boxes, max_loaded=1, load {cfg['load_seconds']:g} s"
    )
    print(f"{'front door':<12}{'loads':>7}{'per box':>14}{'TTFT p50':>10}{'p95':>9}{'max':>9}")
    for name, r in report["results"].items():
        if "skipped" in r:
            print(f"{name:<12}  skipped: {r['skipped']}")
            continue
        per_box = "/".join(str(n) for n in r["loads_per_box"].values())
        print(
            f"{name:<12}{r['loads']:>7}{per_box:>14}{r['ttft_p50_s']:>9.2f}s"
            f"{r['ttft_p95_s']:>8.2f}s{r['ttft_max_s']:>8.2f}s"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=9, help="requests per client")
    parser.add_argument("--load-seconds", type=float, default=3.0, help="each model load")
    parser.add_argument("--only", choices=("nginx", "ollama-tap"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--tap-tree",
        type=Path,
        metavar="DIR",
        help="run ollama-tap from this source tree (e.g. `git archive BRANCH | tar -x -C DIR`)",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    doors = [args.only] if args.only else ["nginx", "ollama-tap"]
    results = {
        door: asyncio.run(front_door(door, args.requests, args.load_seconds, args.tap_tree))
        for door in doors
    }
    report = {
        "config": {
            "requests": args.requests,
            "load_seconds": args.load_seconds,
            "tap_tree": str(args.tap_tree) if args.tap_tree else None,
        },
        "results": results,
    }
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

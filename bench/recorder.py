"""Recorder on vs off at a paced rate: drops, hook cost, CPU, and what it adds to TTFT.

Drives the Recorder's hooks directly (as the relay does) at RATE exchanges per second,
each a native chat with a request body and CHUNKS output pieces, with the writer thread
storing to a temporary SQLite file. Reported per mode: exchanges dropped, the p50/p99 time
spent in the hooks per exchange, the p50 of the time spent before the first token's
bytes could be written (the request hook) plus the first chunk hook — the recorder's share
of the client's time to first token — and the process CPU (all threads, the writer's
included) per exchange; the difference to ``off`` is what recording costs.

    .venv/bin/python -m bench.recorder [--rate 2000] [--seconds 5] [--chunks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry

from ollama_tap.config import Settings
from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind, RequestFields, Usage
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters

BODY = orjson.dumps(
    {"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue? " * 20}]}
)


def _exchange() -> Exchange:
    ex = Exchange(
        method="POST",
        path="/api/chat",
        query="",
        endpoint="/api/chat",
        client="127.0.0.1",
        request_headers={"Content-Type": "application/json", "User-Agent": "bench"},
        request=RequestFields(model="llama3.2", options={"num_ctx": 4096}, parsed=True),
    )
    ex.request_body, ex.request_bytes = BODY, len(BODY)
    return ex


def _one(rec: Recorder, chunks: int) -> tuple[float, float]:
    """Hook time for one exchange: (before-and-at the first token, whole exchange)."""
    ex = _exchange()
    t0 = time.perf_counter()
    rec.request(ex)
    first = 0.0
    for i in range(chunks):
        piece = OutputChunk(time.monotonic(), OutputKind.CONTENT, f" tok{i}", 90)
        ex.output_events += 1
        rec.chunks(ex, (piece,))
        if i == 0:
            first = time.perf_counter() - t0
    ex.status, ex.streamed, ex.outcome, ex.ended = 200, True, Outcome.OK, time.monotonic()
    ex.usage = Usage(2_000_000, 100_000, 26, 200_000, chunks, 1_500_000, None, True)
    rec.response(ex)
    return first, time.perf_counter() - t0


async def run(mode: str, rate: int, seconds: float, chunks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        registry = CollectorRegistry()
        settings = Settings.model_validate({"db": db, "record": mode})
        rec = Recorder(settings, registry)
        await rec.start()
        firsts, totals, depth = [], [], 0.0
        start, cpu = time.perf_counter(), time.process_time()
        for n in range(int(rate * seconds)):
            # Pace to the target rate, yielding to the loop as a real server would.
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            first, total = _one(rec, chunks)
            firsts.append(first)
            totals.append(total)
            depth = max(depth, registry.get_sample_value("ollama_tap_recorder_queue_depth") or 0)
        elapsed = time.perf_counter() - start
        await rec.stop()
        cpu = time.process_time() - cpu
        page, _ = await asyncio.to_thread(rec.store.page, Filters(), 1)
        dropped = registry.get_sample_value("ollama_tap_records_dropped_total") or 0
        size = db.stat().st_size if db.exists() else 0
    q = statistics.quantiles(totals, n=100)
    return {
        "achieved_rate": len(totals) / elapsed,
        "dropped": dropped,
        "max_queue_depth": depth,
        "hook_us_p50": q[49] * 1e6,
        "hook_us_p99": q[98] * 1e6,
        "ttft_added_us_p50": statistics.median(firsts) * 1e6,
        "cpu_us_per_exchange": cpu / len(totals) * 1e6,
        "db_bytes": size,
        "recorded": float(bool(page)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--chunks", type=int, default=20)
    args = parser.parse_args()
    results = {
        m: asyncio.run(run(m, args.rate, args.seconds, args.chunks))
        for m in ("off", "full", "metadata")
    }
    for mode, r in results.items():
        print(mode.ljust(9), "  ".join(f"{k}={v:,.1f}" for k, v in r.items()))
    added = results["full"]["ttft_added_us_p50"] - results["off"]["ttft_added_us_p50"]
    print(f"added TTFT p50 (full - off): {added:.1f} µs (target ≤ 200 µs)")
    for mode in ("full", "metadata"):
        cpu = results[mode]["cpu_us_per_exchange"] - results["off"]["cpu_us_per_exchange"]
        print(
            f"recording CPU ({mode} - off): {cpu:.1f} µs per exchange,"
            f" {cpu / args.chunks:.2f} µs per chunk at {args.chunks} chunks"
        )


if __name__ == "__main__":
    main()

"""What the metrics observer costs per exchange and per relayed chunk, in-process.

Drives `MetricsObserver` hook by hook, as the relay does, on a fresh registry: a native
/api/generate stream with full usage and num_ctx, so every family the observer feeds is fed.
The exchange and its chunks are built once and reused, so only the observer is timed.

    .venv/bin/python -m bench.metrics             # from the repository root; 20 chunks
    .venv/bin/python -m bench.metrics --exchanges 50000 --chunks 100 --rounds 7

Three figures: request + response with no chunk; one chunk, fed to an open exchange; and a
whole exchange with `--chunks` chunks. Each is the best of the rounds, the least disturbed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind, Usage
from ollama_tap.metrics.observer import MetricsObserver
from ollama_tap.names import ModelLabels

T0 = 100.0
SEC = 1_000_000_000


class Models:
    """Stands in for the poller: no runtime context known, pokes ignored."""

    def context_length(self, model: str | None) -> int | None:
        return None

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        if then is not None:
            then()


def exchange(chunks: int) -> Exchange:
    """A finished native stream, as the relay leaves it before the `response` hook."""
    ex = Exchange(
        method="POST",
        path="/api/generate",
        query="",
        endpoint="/api/generate",
        client="127.0.0.1",
        request_headers={},
        started=T0,
        started_wall=1_700_000_000.0,
    )
    ex.request.model, ex.request.options = "llama3.2", {"num_ctx": 4096}
    ex.status, ex.streamed, ex.outcome, ex.done_reason = 200, True, Outcome.OK, "stop"
    ex.usage = Usage(
        total_duration=3 * SEC,
        load_duration=SEC // 2,
        prompt_eval_count=26,
        prompt_eval_duration=SEC // 2,
        eval_count=30,
        eval_duration=3 * SEC // 2,
        prompt_eval_cached_count=6,
        has_timings=True,
    )
    ex.first_output = ex.first_content = T0 + 1.0
    ex.last_output, ex.output_events = T0 + 1.0 + 0.05 * chunks, chunks
    ex.ended = T0 + 4.0
    return ex


def observer() -> MetricsObserver:
    labels = ModelLabels(100)
    labels.set_known("tags", ["llama3.2:latest"])
    return MetricsObserver(CollectorRegistry(), labels, Models())


def exchanges(chunks: int) -> Callable[[int], float]:
    """A function that runs n exchanges of `chunks` chunks each and returns the seconds taken."""
    ex = exchange(chunks)
    pieces = [OutputChunk(T0 + 1.0 + 0.05 * i, OutputKind.CONTENT, "x", 60) for i in range(chunks)]
    obs = observer()
    request, chunk, response = obs.request, obs.chunks, obs.response

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            request(ex)
            for piece in pieces:
                chunk(ex, (piece,))  # one piece a read, as paced streams arrive
            response(ex)
        return time.perf_counter() - start

    return run


def chunks() -> Callable[[int], float]:
    """A function that feeds n chunks to one open exchange and returns the seconds taken."""
    ex = exchange(1)
    obs = observer()
    obs.request(ex)
    pieces = [OutputChunk(T0 + 1.0 + 0.05 * i, OutputKind.CONTENT, "x", 60) for i in range(100)]
    chunk = obs.chunks

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n // len(pieces)):
            for piece in pieces:
                chunk(ex, (piece,))
        return time.perf_counter() - start

    return run


def best(run: Callable[[int], float], n: int, rounds: int) -> float:
    """Seconds per call of the least disturbed round, after a warm-up round (first-use
    label children and caches)."""
    run(n // 10)
    return min(run(n) for _ in range(rounds)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=20_000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n, k = args.exchanges, args.chunks
    bare = best(exchanges(0), n, args.rounds)
    per_chunk = best(chunks(), n * k, args.rounds)
    full = best(exchanges(k), n, args.rounds)
    print(f"best of {args.rounds} rounds of {n} exchanges, {n * k} chunks")
    print(f"per exchange, request + response:  {bare * 1e6:7.2f} µs")
    print(f"per chunk:                         {per_chunk * 1e6:7.3f} µs")
    print(f"per exchange with {k} chunks:      {full * 1e6:7.2f} µs")


if __name__ == "__main__":
    main()

"""A minimal Ollama-shaped NDJSON upstream for the benchmarks: as cheap as it can be.

Besides streaming, it answers the routes ollama-tap's poller reads (/api/version,
/api/tags, /api/ps, /api/show) with a model named `bench`, as an Ollama serving that model
would. Without them the proxy would measure a pathological set-up rather than a real one:
Ollama seen as down, and every request's unknown model name asking for an /api/tags
refresh (rate-limited to one per 5 s, which lands on each round's first requests).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

TOKEN = (
    b'{"model":"bench","created_at":"2026-01-01T00:00:00.000000Z","response":" tok","done":false}\n'
)
FINAL = (
    b'{"model":"bench","created_at":"2026-01-01T00:00:01.000000Z","response":"",'
    b'"done":true,"done_reason":"stop","total_duration":1000000,"load_duration":1000,'
    b'"prompt_eval_count":10,"prompt_eval_duration":1000,"eval_count":%d,'
    b'"eval_duration":900000}\n'
)


_TRACE_PATH = os.environ.get("BENCH_TRACE")
TRACE = open(_TRACE_PATH, "a", buffering=1) if _TRACE_PATH else None  # noqa: SIM115 (process-long)
"""`overhead.py --trace`: per request with an `id`, when it reached the handler and when its
first token was written (perf_counter: CLOCK_MONOTONIC, the same clock in every process)."""


async def generate(request: web.Request) -> web.StreamResponse:
    """Stream `n` tokens, `delay` seconds apart, then Ollama's final object.

    Each token is written on a turn of its own, even at `delay` 0: Ollama's handlers write
    one token per decode step, so streams running at once interleave token by token. With
    `"flood": true` the whole stream is written in one go instead (aiohttp's `write` does
    not yield below its buffer limit): hundreds of lines reach the relay per read, which
    measures bulk line parsing rather than anything a model produces.
    """
    got = time.perf_counter()
    body = await request.json()
    n, delay = int(body.get("n", 500)), float(body.get("delay", 0))
    flood = bool(body.get("flood", False))
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    for i in range(n):
        if i == 0 and TRACE is not None and "id" in body:
            # Stamped before the write: no client can have read the line earlier.
            TRACE.write(f"{body['id']} {got} {time.perf_counter()}\n")
        await resp.write(TOKEN)
        if not flood:
            await asyncio.sleep(delay)
    await resp.write(FINAL % n)
    return resp


DIGEST = "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72"
DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "bench",
    "families": ["bench"],
    "parameter_size": "1B",
    "quantization_level": "Q4_K_M",
}
MODEL = {
    "name": "bench:latest",
    "model": "bench:latest",
    "size": 1_000_000_000,
    "digest": DIGEST,
    "details": DETAILS,
}
TAGS = {"models": [{**MODEL, "modified_at": "2026-01-01T00:00:00Z"}]}
PS = {
    "models": [
        {
            **MODEL,
            "expires_at": "2099-01-01T00:00:00Z",
            "size_vram": 1_000_000_000,
            "context_length": 4096,
        }
    ]
}
SHOW = {"details": DETAILS, "model_info": {"general.architecture": "bench"}}


async def root(request: web.Request) -> web.Response:
    return web.Response(text="Ollama is running")


def state(data: object) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response(data)

    return answer


def main() -> None:
    app = web.Application()
    app.router.add_post("/api/generate", generate)
    app.router.add_get("/", root)
    app.router.add_get("/api/version", state({"version": "0.12.6"}))
    app.router.add_get("/api/tags", state(TAGS))
    app.router.add_get("/api/ps", state(PS))
    app.router.add_post("/api/show", state(SHOW))
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()

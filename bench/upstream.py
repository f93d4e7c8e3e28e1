"""A minimal Ollama-shaped NDJSON upstream for the benchmarks: as cheap as it can be."""

from __future__ import annotations

import asyncio
import sys

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


async def generate(request: web.Request) -> web.StreamResponse:
    """Stream `n` tokens, `delay` seconds apart, then Ollama's final object.

    Each token is written on a turn of its own, even at `delay` 0: Ollama's handlers write
    one token per decode step, so streams running at once interleave token by token. With
    `"flood": true` the whole stream is written in one go instead (aiohttp's `write` does
    not yield below its buffer limit): hundreds of lines reach the relay per read, which
    measures bulk line parsing rather than anything a model produces.
    """
    body = await request.json()
    n, delay = int(body.get("n", 500)), float(body.get("delay", 0))
    flood = bool(body.get("flood", False))
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    for _ in range(n):
        await resp.write(TOKEN)
        if not flood:
            await asyncio.sleep(delay)
    await resp.write(FINAL % n)
    return resp


async def root(request: web.Request) -> web.Response:
    return web.Response(text="Ollama is running")


def main() -> None:
    app = web.Application()
    app.router.add_post("/api/generate", generate)
    app.router.add_get("/", root)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()

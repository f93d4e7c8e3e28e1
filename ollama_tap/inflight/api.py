"""GET /_tap/api/inflight: what is in flight now, once or (`?watch=1`) as server-sent events."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

import orjson
from aiohttp import web

from ollama_tap.auth import API_HEADERS
from ollama_tap.inflight.registry import InFlight

PUSH_INTERVAL: Final = 0.25
"""Seconds between two looks at the registry while watching: at most 4 pushes a second."""
REFRESH: Final = 1.0
"""While anything is in flight, a push at least this often (elapsed times grow)."""
KEEPALIVE: Final = 15.0
"""Seconds of an idle watch between two SSE comments, so proxies keep the stream open."""


def _shape(snapshot: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a watcher must hear about at once: arrivals, ends, phases, positions, outputs."""
    return [(r["id"], r["phase"], r["position"], r["outputs"]) for r in snapshot["exchanges"]]


def add_routes(app: web.Application, inflight: InFlight) -> None:
    """GET /_tap/api/inflight (guarded like every /_tap/ route by the auth middleware)."""
    watchers: set[asyncio.Task[Any]] = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch", "0")
        if watch not in {"0", "1", "true", "false"}:
            return web.json_response(
                {"error": f"watch must be 1, 0, true or false, not {watch!r}"}, status=400
            )
        if watch in {"0", "false"}:
            return web.Response(
                body=orjson.dumps(inflight.snapshot()), content_type="application/json"
            )
        task = asyncio.current_task()
        if task is not None:
            watchers.add(task)
        try:
            return await _watch(request, inflight)
        finally:
            watchers.discard(task)

    async def stop_watchers(app: web.Application) -> None:
        # A watch never ends by itself: shutdown would otherwise wait out its timeout.
        for task in list(watchers):
            task.cancel()

    app.on_shutdown.append(stop_watchers)
    app.router.add_get("/_tap/api/inflight", handle)


async def _watch(request: web.Request, inflight: InFlight) -> web.StreamResponse:
    # Prepared here, before the auth middleware could add its headers: they go along now.
    response = web.StreamResponse(
        headers={**API_HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    last_shape: list[tuple[Any, ...]] | None = None
    last_push = last_write = float("-inf")
    with contextlib.suppress(ConnectionResetError):  # the watcher went away
        while True:
            snapshot = inflight.snapshot()
            shape, now = _shape(snapshot), loop.time()
            due = snapshot["exchanges"] and now - last_push >= REFRESH
            if shape != last_shape or due:
                await response.write(b"data: " + orjson.dumps(snapshot) + b"\n\n")
                last_shape, last_push, last_write = shape, now, now
            elif now - last_write >= KEEPALIVE:
                await response.write(b": keep-alive\n\n")
                last_write = now
            await asyncio.sleep(PUSH_INTERVAL)
    return response

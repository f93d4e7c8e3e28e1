"""GET /_tap/api/loads: the recent load events, newest first (the auth middleware guards it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import orjson
from aiohttp import web

from ollama_tap.loads.book import RING
from ollama_tap.loads.tracker import LoadTracker

DEFAULT_LIMIT: Final = 100


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def add_routes(app: web.Application, trackers: Sequence[LoadTracker], *, with_client: bool) -> None:
    """`?model=` keeps one model's events, `?box=` one box's (with several), `?limit=` (1 to
    RING) caps how many; client addresses only `with_client` (full recording mode: the
    metadata mode keeps none). Every box's events, newest first."""

    async def loads(request: web.Request) -> web.Response:
        raw = request.query.get("limit", str(DEFAULT_LIMIT))
        if not raw.isdigit() or not 1 <= int(raw) <= RING:
            return _json(
                {"error": f"limit must be a whole number from 1 to {RING}, not {raw!r}"}, 400
            )
        model, box = request.query.get("model") or None, request.query.get("box")
        events = [
            event
            for tracker in trackers
            if box is None or tracker.box == box
            for event in tracker.recent(model, int(raw), with_client=with_client)
        ]
        events.sort(key=lambda e: e["at"], reverse=True)
        return _json({"loads": events[: int(raw)]})

    app.router.add_get("/_tap/api/loads", loads)

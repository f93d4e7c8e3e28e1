"""GET /_tap/api/context: the advice of `ollama-tap context`, for the inspector's Loads view.

`?since=` (default: a day ago), `?until=`, `?model=`, `?client=` choose the window, in the
forms of /_tap/api/records. Guarded like every /_tap/ route by the auth middleware; the
database read runs in a thread (recorder/reads.py), and Ollama is asked through the app's
upstream session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from ollama_tap.advice.report import advise
from ollama_tap.advice.upstream import read_upstream
from ollama_tap.advice.window import tally
from ollama_tap.recorder.backend import StoreUnavailable
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters, parse_time

if TYPE_CHECKING:
    from ollama_tap.recorder import Recorder

DEFAULT_SINCE: Final = 86_400.0


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _window(query: dict[str, str]) -> Filters:
    since, until = query.get("since"), query.get("until")
    return Filters(
        model=query.get("model") or None,
        client=query.get("client") or None,
        since=parse_time(since) if since else time.time() - DEFAULT_SINCE,
        until=parse_time(until) if until else None,
    )


def add_routes(
    app: web.Application,
    recorder: Recorder,
    session: Callable[[], aiohttp.ClientSession],
    upstream: URL,
) -> None:
    """GET /_tap/api/context: `{"window": {since, until}, "advice": [...], "problem"}`."""

    async def context(request: web.Request) -> web.Response:
        try:
            window = _window(dict(request.query))
        except ValueError as exc:
            return _json({"error": str(exc)}, 400)
        try:
            tallies = await recorder.reads.run(tally, recorder.store, window)
        except SchemaError as exc:
            return _json({"error": str(exc)}, 500)
        except StoreUnavailable as exc:
            return _json({"error": str(exc)}, 503)
        found = await read_upstream(session(), upstream, [t.model for t in tallies])
        return _json({
            "window": {"since": window.since, "until": window.until},
            "advice": advise(tallies, found),
            "problem": found.problem,
        })  # fmt: skip

    app.router.add_get("/_tap/api/context", context)

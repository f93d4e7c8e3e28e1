"""The read API under /_tap/api/: records listed with filters and a cursor, and one record.

Access control is the auth middleware's (ollama_tap/auth.py); every database read runs in a
thread, never on the event loop, and is awaited for --db-timeout at most (reads.py).

One record is every stored field (``context`` is the list of ids, as stored and exported)
plus ``decoded_context``, made when read (see `ollama_tap.tokens.context.decode_record`): the
text of the ids with the vocabulary of the digest the record was made with, or the reason
it has none. ``?tokens=1`` adds the per-token view (id, text, kind of each id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
from aiohttp import web

from ollama_tap.recorder.backend import StoreUnavailable
from ollama_tap.recorder.schema import SchemaError
from ollama_tap.recorder.store import Filters, parse_time
from ollama_tap.tokens.context import LoadVocab, decode_record

if TYPE_CHECKING:
    from ollama_tap.recorder import Recorder

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 1000


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def filters_of(query: Mapping[str, str]) -> Filters:
    since, until = query.get("since"), query.get("until")
    return Filters(
        model=query.get("model") or None,
        endpoint=query.get("endpoint") or None,
        outcome=query.get("outcome") or None,
        client=query.get("client") or None,
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        truncated=_flag(query, "truncated"),
        instance=query.get("instance") or None,
        box=query.get("box") or None,
    )


def _limit(query: Mapping[str, str]) -> int:
    raw = query.get("limit", str(DEFAULT_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {raw!r}")
    return int(raw)


def _cursor(query: Mapping[str, str]) -> str | None:
    cursor = query.get("cursor") or None
    # ASCII digits only (`²` is a digit to str.isdigit, and no int) and within a row id.
    if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) < 19):
        raise ValueError("cursor is invalid; pass back the next_cursor of the previous page")
    return cursor


def _flag(query: Mapping[str, str], name: str) -> bool:
    raw = query.get(name, "0")
    if raw not in {"0", "1", "true", "false"}:
        raise ValueError(f"{name} must be 1, 0, true or false, not {raw!r}")
    return raw in {"1", "true"}


def add_routes(
    app: web.Application, recorder: Recorder, *, vocabs: LoadVocab | None = None
) -> None:
    """GET /_tap/api/records and GET /_tap/api/records/{id}.

    `vocabs` loads a vocabulary by model and digest (the app's `VocabCache.get`); without
    it, records say that no vocabulary source is configured instead of decoding.
    """
    store, reads = recorder.store, recorder.reads

    async def records(request: web.Request) -> web.Response:
        try:
            args = (filters_of(request.query), _limit(request.query), _cursor(request.query))
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            page, cursor = await reads.run(store.page, *args)
        except SchemaError as exc:
            return _error(500, str(exc))
        except StoreUnavailable as exc:
            return _error(503, str(exc))
        return _json({"records": page, "next_cursor": cursor})

    async def record(request: web.Request) -> web.Response:
        record_id = request.match_info["id"]
        try:
            tokens = _flag(request.query, "tokens")
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            found = await reads.run(store.get, record_id)
        except SchemaError as exc:
            return _error(500, str(exc))
        except StoreUnavailable as exc:
            return _error(503, str(exc))
        if found is None:
            return _error(404, f"no record {record_id!r}; list them at /_tap/api/records")
        found["decoded_context"] = await decode_record(found, vocabs, tokens)
        return _json(found)

    app.router.add_get("/_tap/api/records", records)
    app.router.add_get("/_tap/api/records/{id}", record)

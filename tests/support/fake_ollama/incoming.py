"""Requests as the fake records them: header pairs as they arrived, and the body it read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.replies import Refused


@dataclass
class Received:
    """One request as it arrived: raw header pairs in order and case, body bytes read."""

    method: str
    path_qs: str
    headers: list[tuple[str, str]]
    body: bytes = b""


RECEIVED = web.RequestKey("received", Received)


async def read_body(request: web.Request) -> bytes:
    """The whole body, kept on the request's `Received` record."""
    body = await request.read()
    request[RECEIVED].body = body
    return body


async def json_body(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object, refused in the words of Go's decoder otherwise."""
    raw = await read_body(request)
    if not raw:
        raise Refused(400, "missing request body")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise Refused(400, f"invalid character in JSON: {exc.args[0]}") from None
    if not isinstance(body, dict):
        raise Refused(400, "json: cannot unmarshal array into Go value of type api.Request")
    return body

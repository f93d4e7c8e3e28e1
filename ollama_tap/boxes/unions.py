"""The answers made of every box, for routes that name no model: /api/tags and /v1/models
list each model once, /api/ps each resident model once, /api/version the lowest version.

Each is read from every box that is up, at the time of the request (not from the last
poll: a client that just pulled a model sees it), in Ollama's own shapes, so every client
keeps working. A box that fails to answer is left out; when none answers, the exchange ends
as the proxy's 502, as with one box.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import aiohttp
import orjson

from ollama_tap.boxes.box import Box
from ollama_tap.ollama.version import parse_version

UNION_ROUTES: Final = frozenset({"/api/tags", "/api/ps", "/api/version", "/v1/models"})
"""GET routes answered from every box."""
UNION_TYPE: Final = "application/json; charset=utf-8"
"""Ollama's (gin's) Content-Type on these routes."""
TIMEOUT: Final = aiohttp.ClientTimeout(total=10, sock_connect=3)
"""As the poller's: a box slower than this is left out of the answer."""
_LISTS: Final = {
    "/api/tags": ("models", "name"),
    "/api/ps": ("models", "name"),
    "/v1/models": ("data", "id"),
}


class NoBoxAnswered(Exception):
    """Every box failed to answer (the message says how the first one failed)."""


class Unions:
    """Reads a route from every box and merges the answers."""

    def __init__(self, boxes: Sequence[Box]) -> None:
        self.boxes = list(boxes)
        self._session: aiohttp.ClientSession | None = None

    async def answer(self, endpoint: str, raw_path_qs: str) -> bytes:
        """The merged JSON body for `endpoint` (one of UNION_ROUTES)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=TIMEOUT, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
            )
        up = [b for b in self.boxes if not b.down] or self.boxes
        found = await asyncio.gather(*(self._read(b, raw_path_qs) for b in up))
        answers = [a for a in found if isinstance(a, dict)]
        if not answers:
            errors = [a for a in found if isinstance(a, BaseException)]
            raise NoBoxAnswered(str(errors[0]) if errors else "no box answered")
        return orjson.dumps(merged(endpoint, answers))

    async def _read(self, box: Box, raw_path_qs: str) -> dict[str, Any] | BaseException:
        assert self._session is not None
        url = str(box.url).rstrip("/") + raw_path_qs
        try:
            async with self._session.get(url) as resp:
                if resp.status != 200:
                    return ConnectionError(f"{box.name}: HTTP {resp.status}")
                data = orjson.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
            return ConnectionError(f"{box.name}: {exc or type(exc).__name__}")
        return data if isinstance(data, dict) else ConnectionError(f"{box.name}: not an object")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def merged(endpoint: str, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer of the boxes' (given in configuration order): lists keep each name once,
    as the first box lists it; the version is the lowest any box runs."""
    if endpoint == "/api/version":
        versions = [str(a.get("version", "")) for a in answers]
        known = [v for v in versions if parse_version(v) is not None]
        lowest = min(known, key=lambda v: parse_version(v) or (0, 0, 0)) if known else versions[0]
        return {**answers[0], "version": lowest}
    key, name = _LISTS[endpoint]
    seen: set[str] = set()
    rows: list[Any] = []
    for answer in answers:
        for row in answer.get(key) or ():
            ident = row.get(name) if isinstance(row, dict) else None
            if isinstance(ident, str) and ident not in seen:
                seen.add(ident)
                rows.append(row)
    return {**answers[0], key: rows}

"""Who may read the recordings through `replay serve`, and what one request may hold.

A recording is someone's conversation (its `context` ids decode back to the prompt), and with
`--match nearest` any request gets one: so every route but the two that reveal nothing (`/`
and `/api/version`, the liveness checks of Ollama's clients) needs the admin token as an
`Authorization: Bearer` header, which Ollama's and OpenAI's clients send as their API key.
Only a loopback bind may serve without it (`--no-token`). Wrong tokens earn the proxy's
back-off (ollama_tap/attempts.py). Request bodies are read whole to be matched, so each is
bounded (MAX_BODY) and so is the number read at once (READERS).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from ollama_tap import ollama
from ollama_tap.attempts import FailedAttempts
from ollama_tap.auth import GuessWatch, Middleware, bearer, matches

OPEN_PATHS: Final = frozenset({"/", "/api/version"})
MAX_BODY: Final = 16 * 1024 * 1024
"""Bytes of a request body read to match it: twice the recorder's default body tee
(--body-tee-limit), past which no body was recorded whole to be matched."""
READERS: Final = 4
"""Request bodies read at once; the others wait their turn with their bytes unread (the
server reads ahead at most its buffer's 128 KiB), so bodies hold at most READERS × MAX_BODY."""
_JSON: Final = "application/json; charset=utf-8"


def _error(
    request: web.Request, status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    family = ollama.family_of(ollama.endpoint_of(request.raw_path))
    body = ollama.error_body(family, status, message)
    return web.Response(
        status=status, body=body, headers={"Content-Type": _JSON, **(headers or {})}
    )


def token_middleware(token: str) -> Middleware:
    """Refuse every request but OPEN_PATHS that lacks `token` as a Bearer credential."""
    watch = GuessWatch(FailedAttempts())

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS and request.method in {"GET", "HEAD"}:
            return await handler(request)
        given = bearer(request)
        if matches(given, token):
            return await handler(request)
        if given is not None:
            wait = watch.failed(request.remote or "")
            if wait is not None:
                return _error(
                    request, 429, f"too many wrong tokens; try again in {wait} s with the "
                    "admin token", {"Retry-After": str(wait)},
                )  # fmt: skip
        return _error(
            request,
            401,
            "replay serve needs the admin token: send 'Authorization: Bearer <token>' (the "
            "API key of Ollama's and OpenAI's clients); it is OLLAMA_TAP_ADMIN_TOKEN, else "
            "the file admin-token beside the database",
            {"WWW-Authenticate": 'Bearer realm="ollama-tap replay"'},
        )

    return middleware


class TooLarge(Exception):
    """A request body past MAX_BODY."""


class Readers:
    """Reads request bodies whole, READERS at a time, each up to MAX_BODY."""

    def __init__(self, limit: int = READERS, max_body: int = MAX_BODY) -> None:
        self._slots = asyncio.Semaphore(limit)
        self.max_body = max_body
        self.reading = 0
        """Bodies being read now (at most `limit`)."""

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        async with self._slots:
            self.reading += 1
            try:
                yield
            finally:
                self.reading -= 1

    async def read(self, request: web.Request) -> bytes:
        """The whole body; TooLarge past `max_body` (said by Content-Length before any of
        it is read, else when the bytes read pass it)."""
        if request.content_length is not None and request.content_length > self.max_body:
            raise TooLarge
        async with self._slot():
            parts, size = [], 0
            async for data in request.content.iter_any():
                size += len(data)
                if size > self.max_body:
                    raise TooLarge
                parts.append(data)
            return b"".join(parts)

    def too_large(self, request: web.Request) -> web.Response:
        return _error(
            request,
            413,
            f"the request body is larger than the {self.max_body // (1024 * 1024)} MiB "
            "replay serve reads to match it; no recording holds a body this large",
        )

"""Sending replies as Go's net/http and gin do: fixed bodies, lazy streams, SSE frames."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.gojson import go_json
from tests.support.fake_ollama.script import Chunk, Die, Error, Event, fold


class Refused(Exception):
    """A request answered with an error status before any output; each route family shapes it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def send(
    request: web.Request, status: int, body: bytes, content_type: str | None
) -> web.StreamResponse:
    """Send a fixed body as Go's net/http does: Content-Length up to 2048 bytes, else chunked."""
    headers = {"Content-Type": content_type} if content_type else {}
    if len(body) <= 2048 or request.method == "HEAD":
        return web.Response(status=status, body=body or None, headers=headers)
    response = web.StreamResponse(status=status, headers=headers)
    await response.prepare(request)
    await response.write(body)
    await response.write_eof()
    return response


async def gin_json(request: web.Request, value: Any, status: int = 200) -> web.StreamResponse:
    """gin's c.JSON: charset in the type, no trailing newline."""
    return await send(request, status, go_json(value), "application/json; charset=utf-8")


async def encoder_json(request: web.Request, value: Any, status: int = 200) -> web.StreamResponse:
    """A /v1 writer's json.NewEncoder(...).Encode: bare type, trailing newline."""
    return await send(request, status, go_json(value) + b"\n", "application/json")


ErrorReply = Callable[[web.Request, int, str], Awaitable[web.StreamResponse]]


class LazyStream:
    """A streamed reply whose status line and headers leave with its first bytes."""

    def __init__(self, request: web.Request, headers: dict[str, str]) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=headers)

    @property
    def started(self) -> bool:
        return self.response.prepared

    async def write(self, data: bytes) -> None:
        if not self.response.prepared:
            await self.response.prepare(self.request)
        await self.response.write(data)

    async def finish(self) -> web.StreamResponse:
        if not self.response.prepared:
            await self.response.prepare(self.request)
        await self.response.write_eof()
        return self.response

    def die(self) -> web.StreamResponse:
        """Close the TCP connection mid-reply, as a crashing server would."""
        return die(self.request, self.response)


def die(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    # What was written is flushed, then the socket closes without the terminating chunk;
    # aiohttp's own write_eof then meets a closed transport, which it treats as a disconnect.
    if request.transport is not None:
        request.transport.close()
    return response


def sse_data(payload: Any) -> bytes:
    return b"data: " + go_json(payload) + b"\n\n"


def sse_event(kind: str, payload: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + go_json(payload) + b"\n\n"


async def write_events(
    request: web.Request,
    events: AsyncIterator[Event],
    convert: Callable[[Chunk], list[tuple[str, dict[str, Any]]]],
    headers: dict[str, str],
    error: ErrorReply,
) -> web.StreamResponse:
    """`event:`/`data:` SSE; a mid-stream error just ends the stream without its terminal event."""
    out = LazyStream(request, headers)
    async for event in events:
        if isinstance(event, Die):
            return out.die()
        if isinstance(event, Error):
            if not out.started:
                return await error(request, event.status, event.message)
            break
        for kind, payload in convert(event):
            await out.write(sse_event(kind, payload))
    return await out.finish()


async def fold_or_refuse(
    request: web.Request, events: AsyncIterator[Event]
) -> Chunk | web.StreamResponse:
    """The folded reply of a compatibility route; a runner error is refused in its shape."""
    result = await fold(events)
    if isinstance(result, Die):
        return die(request, web.StreamResponse())
    if isinstance(result, Error):
        raise Refused(result.status, result.message)
    return result

"""Helpers of the transport tests: a hook recorder, an upstream written by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ollama_tap.exchange import Exchange, OutputChunk
from tests.support.transparency import comparable

MARK = {"X-Test": "relay-comparison"}
"""A header on the tests' own requests, which hand-written upstreams tell from the poller's."""
_TIMES = ("response_started", "first_output", "first_content", "last_output", "ended")

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Recorder:
    """An observer that writes down every hook call and what the exchange held then."""

    name = "hook-recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def request(self, ex: Exchange) -> None:
        self.calls.append(("request", (ex.request, ex.request_body, ex.request_bytes)))

    def response_headers(self, ex: Exchange) -> None:
        headers = comparable(list(ex.response_headers.items()))
        self.calls.append(("response_headers", (ex.status, headers, ex.streamed)))

    def chunk(self, ex: Exchange, piece: OutputChunk) -> None:
        self.calls.append(("chunk", (piece.kind, piece.text)))

    def response(self, ex: Exchange) -> None:
        self.calls.append(("response", snapshot(ex)))

    def error(self, ex: Exchange) -> None:
        self.calls.append(("error", snapshot(ex)))


def snapshot(ex: Exchange) -> tuple[Any, ...]:
    """What the hooks saw, clock-bound values only as present or not."""
    usage = ex.usage and (ex.usage.prompt_eval_count, ex.usage.eval_count)
    times = tuple(getattr(ex, name) is None for name in _TIMES)
    return (
        ex.method, ex.path, ex.query, ex.endpoint, ex.status, ex.content_type, ex.outcome,
        ex.output_events, ex.done_reason, ex.error_message, usage, times,
    )  # fmt: skip


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def answered_then_dropped(connections: set[int] | None = None) -> RawHandler:
    """An upstream that answers the first marked (X-Test) request of each connection and
    drops the connection at the next one, the race a keep-alive timeout causes: the proxy's
    reused connection dies before answering. The poller's reads get a 404; `connections`
    collects the client ports of the marked requests."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        while head := await read_head(reader):
            if b"X-Test" not in head:  # the proxy's poller
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            if connections is not None:
                connections.add(writer.get_extra_info("peername")[1])
            if answered:
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            answered = True

    return serve

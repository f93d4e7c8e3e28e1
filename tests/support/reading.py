"""Driving the proxy's reply readers by hand: an exchange, pieces fed at set times, framing."""

from __future__ import annotations

import orjson

from ollama_tap import ollama
from ollama_tap.exchange import Exchange, OutputChunk, OutputKind
from tests.support.exchanges import new_exchange

NDJSON = "application/x-ndjson"
SSE = "text/event-stream"
JSON = "application/json; charset=utf-8"
C, T, TOOL = OutputKind.CONTENT, OutputKind.THINKING, OutputKind.TOOL_CALL


def make_exchange(endpoint: str, content_type: str = NDJSON, status: int = 200) -> Exchange:
    return new_exchange(
        endpoint,
        id="test-1",
        started=100.0,
        started_wall=1_760_000_000.0,
        status=status,
        content_type=content_type,
    )


def read(
    ex: Exchange, pieces: list[bytes], limit: int = 1 << 20
) -> tuple[ollama.Reader, list[OutputChunk]]:
    """Feed `pieces` at times 101, 102, ... and close at 200."""
    reader = ollama.reader_for(ex, limit)
    assert reader is not None
    out: list[OutputChunk] = []
    for i, piece in enumerate(pieces):
        out += reader.feed(piece, 101.0 + i)
    out += reader.close(200.0)
    return reader, out


def ndjson(*objects: str) -> bytes:
    """Objects (pretty or compact JSON text) as compact NDJSON lines, as Ollama streams them."""
    return b"".join(orjson.dumps(orjson.loads(text)) + b"\n" for text in objects)


def sse(*events: tuple[str | None, str]) -> bytes:
    return b"".join(
        (f"event: {name}\n" if name else "").encode() + b"data: " + data.encode() + b"\n\n"
        for name, data in events
    )


def pieces(out: list[OutputChunk]) -> list[tuple[OutputKind, str]]:
    return [(chunk.kind, chunk.text) for chunk in out]

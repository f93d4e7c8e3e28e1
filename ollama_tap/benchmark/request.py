"""One benchmark request: streamed, read by the proxy's own reader, reduced to its figures."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import aiohttp
import orjson
from yarl import URL

from ollama_tap import ollama
from ollama_tap.exchange import Exchange, Outcome, OutputChunk, RequestFields
from ollama_tap.measures import timings

Api = Literal["generate", "chat"]

REPLY_LIMIT: Final = 1024 * 1024
"""Bytes of a single-object reply (an error body) kept to read Ollama's message."""
_TEXT_LIMIT: Final = 4096
_HEADERS: Final = {"Content-Type": "application/json"}
_TIMED: Final = ("ttft", "ttfc", "duration", "load", "queue_wait", "server_ttft", "client_overhead")


@dataclass(frozen=True, slots=True)
class Target:
    """An endpoint under test: Ollama itself or anything that speaks its API."""

    url: URL
    model: str
    api: Api = "generate"
    options: dict[str, Any] | None = None
    """Ollama's `options` sent with every request (e.g. num_predict), None for none."""

    @property
    def endpoint(self) -> str:
        return f"/api/{self.api}"

    def body(self, prompt: str) -> bytes:
        payload: dict[str, Any] = {"model": self.model, "stream": True}
        if self.api == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        if self.options:
            payload["options"] = self.options
        return orjson.dumps(payload)


@dataclass(slots=True)
class Sample:
    """What one request came to: its outcome and the figures it yielded."""

    kind: str
    """An `Outcome` value: "ok", or the error kind the metrics use."""
    message: str | None = None
    """Ollama's error text, or the client's own for a failed connection or stream."""
    values: dict[str, float] = field(default_factory=dict)
    """Figure name → value (seconds or per second), only the figures this reply carried."""
    cached_reported: bool = False
    """Whether the reply carried `prompt_eval_cached_count` (newer Ollama)."""

    @property
    def ok(self) -> bool:
        return self.kind == Outcome.OK.value


async def send(session: aiohttp.ClientSession, target: Target, prompt: str) -> Sample:
    """Stream one request and measure it; never raises for a failed request."""
    ex = Exchange(
        method="POST",
        path=target.endpoint,
        query="",
        endpoint=target.endpoint,
        client="",
        request_headers=dict(_HEADERS),
        request=RequestFields(model=target.model, stream=True, parsed=True),
        started=time.perf_counter(),
    )
    return _sample(ex, await settled(ex, _stream(session, target, prompt, ex)))


async def settled(ex: Exchange, sending: Awaitable[Outcome]) -> Outcome:
    """The outcome of a request sent as a client, `ex.ended` set: a failure of the connection
    is an outcome too (no status yet: never answered; after it: the stream broke)."""
    try:
        outcome = await sending
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        outcome = Outcome.UPSTREAM_UNREACHABLE if ex.status is None else Outcome.INCOMPLETE
        ex.error_message = str(exc) or type(exc).__name__
    ex.ended = ex.ended or time.perf_counter()
    return outcome


async def _stream(
    session: aiohttp.ClientSession, target: Target, prompt: str, ex: Exchange
) -> Outcome:
    url = target.url / target.endpoint.lstrip("/")
    async with session.post(url, data=target.body(prompt), headers=_HEADERS) as resp:
        ex.status = resp.status
        ex.content_type = resp.headers.get("Content-Type", "")
        ex.streamed = ollama.is_streamed(ex.content_type)
        reader = ollama.reader_for(ex, REPLY_LIMIT)
        # The body's start as text: all an error says when it is not Ollama's {"error": ...}
        # (a gateway's 401, an HTML page), or when nothing reads the reply.
        keep_text = reader is None or resp.status >= 400
        text = bytearray()
        async for data in resp.content.iter_any():
            if reader is not None:
                _outputs(ex, reader.feed(data, time.perf_counter()))
            if keep_text and len(text) < _TEXT_LIMIT:
                text += data
        if reader is not None:
            _outputs(ex, reader.close(time.perf_counter()))
        ex.ended = time.perf_counter()
    return verdict(ex, reader, bytes(text[:_TEXT_LIMIT]).decode(errors="replace").strip())


def _outputs(ex: Exchange, pieces: list[OutputChunk]) -> None:
    if pieces:
        ex.note_outputs(pieces)


def verdict(ex: Exchange, reader: ollama.Reader | None, text: str) -> Outcome:
    """The proxy's outcome rules, with the HTTP status put in front of the message."""
    outcome = ollama.outcome_of(ex, reader)
    if outcome is Outcome.UPSTREAM_ERROR:
        ex.error_message = f"HTTP {ex.status}: {ex.error_message or text or 'no message'}"
    elif outcome is Outcome.OK and (reader is None or not reader.complete):
        outcome = Outcome.INCOMPLETE
    if outcome is Outcome.INCOMPLETE:
        ex.error_message = "the stream ended without Ollama's final object"
    return outcome


def _sample(ex: Exchange, outcome: Outcome) -> Sample:
    if outcome is not Outcome.OK:
        return Sample(kind=outcome.value, message=ex.error_message)
    measured = timings(ex)
    values: dict[str, float | None] = {name: measured[name] for name in _TIMED}
    values["decode_rate"] = ex.usage.decode_rate if ex.usage else None
    values["prefill_rate"] = ex.usage.prefill_rate if ex.usage else None
    values["output_rate"] = ex.output_rate
    return Sample(
        kind=outcome.value,
        values={name: v for name, v in values.items() if v is not None},
        cached_reported=ex.usage is not None and ex.usage.prompt_eval_cached_count is not None,
    )

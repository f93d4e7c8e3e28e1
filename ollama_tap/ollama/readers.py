"""The reply readers: what a reply's bytes mean as they are relayed, and how the reply ended."""

from __future__ import annotations

from typing import Any, Final

import structlog
from orjson import JSONDecodeError
from orjson import loads as _loads

from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind
from ollama_tap.framing import MAX_LINE, LineSplitter, SseEvent, SseSplitter
from ollama_tap.ollama.payloads import (
    Pieces,
    anthropic_delta_pieces,
    chunks_of,
    compact_json,
    compat_stats,
    compat_usage,
    dict_or_none,
    error_text,
    has_counts,
    json_object,
    native_pieces,
    native_stats,
    nonempty_str,
    output_pieces,
    responses_delta_pieces,
)
from ollama_tap.ollama.request import JSON, NDJSON, SSE, media_type
from ollama_tap.ollama.routes import (
    EMBEDDING_ENDPOINTS,
    INFERENCE_ENDPOINTS,
    NATIVE_GENERATION,
    PROGRESS_ENDPOINTS,
    family_of,
)

_REPLY_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes whose single JSON reply is read (any route's error body is read too)."""
_MAX_ERROR_CHARS: Final = 4096
"""Error texts are cut here: they are logged and recorded with every exchange."""
_CONTENT: Final = OutputKind.CONTENT

log = structlog.get_logger("ollama_tap.readers")


def outcome_of(ex: Exchange, reader: Reader | None) -> Outcome:
    """How a reply that was relayed to its end turned out (the shared outcome rules)."""
    if ex.status is not None and ex.status >= 400:
        return Outcome.UPSTREAM_ERROR
    if reader is not None and reader.errored:
        return Outcome.STREAM_ERROR
    if reader is not None and ex.streamed and not reader.complete:
        return Outcome.INCOMPLETE
    return Outcome.OK


def reader_for(ex: Exchange, reply_limit: int) -> Reader | None:
    """The reader for a reply, chosen by endpoint, status and Content-Type; None if nothing
    in it is worth reading (tags, ps, blobs, plain-text 404s, ...)."""
    media = media_type(ex.content_type)
    if media == NDJSON and ex.endpoint in NATIVE_GENERATION:
        return _NativeStreamReader(ex)
    if media == NDJSON and ex.endpoint in PROGRESS_ENDPOINTS:
        return _ProgressReader(ex)
    if media == SSE and ex.endpoint in _SSE_READERS:
        return _SSE_READERS[ex.endpoint](ex)
    if media == JSON and (ex.endpoint in _REPLY_ENDPOINTS or (ex.status or 0) >= 400):
        return _ReplyReader(ex, reply_limit)
    return None


class Reader:
    """Reads a reply's bytes as they are relayed and fills the Exchange with what they mean.

    `feed` returns the output pieces the bytes completed, stamped with `at` (the time they
    were written to the client); `close` is called once at EOF. Readers never raise on
    malformed input: lines or events that are not JSON objects are skipped. They fill
    `usage`, `done_reason`, `error_message`, `final` (the native done:true object or a
    single JSON reply; None for SSE streams) and, on native routes, the `created_at` pair.
    A base class rather than a Protocol: compiled (mypyc), a call through it is direct.
    """

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.complete = False
        """The final object or terminal event was seen, or the single JSON reply was parsed."""
        self.errored = False
        """An error line, error event or error body was seen (`ex.error_message` holds it)."""

    def feed(self, data: bytes, at: float) -> list[OutputChunk]:
        raise NotImplementedError

    def close(self, at: float) -> list[OutputChunk]:
        raise NotImplementedError

    def _gave_up(self, skipped: int) -> None:
        """At the end: lines (or events) past MAX_LINE were relayed but not read; the
        exchange's record and log line say so, unless Ollama's own error is there."""
        if skipped:
            ex = self.ex
            ex.error_message = ex.error_message or (
                f"ollama-tap: {skipped} reply line(s) longer than {MAX_LINE} bytes were "
                "relayed unchanged but not read"
            )
            log.warning("reply_lines_skipped", id=ex.id, path=ex.path, lines=skipped)

    def _fail(self, message: str) -> None:
        self.errored = True
        self.ex.error_message = message[:_MAX_ERROR_CHARS]

    def _payload(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        message = error_text(obj)
        if message is not None:
            self._fail(message)
            return []
        return self._meaning(obj, name, at, nbytes)

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        raise NotImplementedError


class _NdjsonReader(Reader):
    """NDJSON framing; each piece's `nbytes` is its line plus one newline byte."""

    def __init__(self, ex: Exchange) -> None:
        super().__init__(ex)
        self._lines = LineSplitter()

    def feed(self, data: bytes, at: float) -> list[OutputChunk]:
        return self._read(self._lines.feed(data), at)

    def close(self, at: float) -> list[OutputChunk]:
        tail = self._lines.flush()
        out = self._read([tail] if tail else [], at)
        self._gave_up(self._lines.skipped)
        return out

    def _read(self, lines: list[bytes], at: float) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        for line in lines:
            obj = json_object(line)
            if obj is not None:
                out += self._payload(obj, "", at, len(line) + 1)
        return out


class _NativeStreamReader(_NdjsonReader):
    """/api/generate and /api/chat streams: output on any line, stats on the done:true line.

    This is the proxy's hottest path (one call per token of every native stream), so the
    common line — one text piece, no error, thinking, tool calls or stats, not final — is
    read inline, `json_object` included: the generic path costs several microseconds more
    per token in function calls alone.
    """

    def _read(self, lines: list[bytes], at: float) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        ex = self.ex
        for line in lines:
            try:
                obj = _loads(line)
            except JSONDecodeError:
                continue  # empty lines too
            if type(obj) is not dict:
                continue
            message = obj.get("message")
            if (  # not a plain token line: read it the generic way
                obj.get("done") is not False
                or "error" in obj
                or "thinking" in obj
                or "tool_calls" in obj
                or (
                    message is not None
                    and (
                        type(message) is not dict
                        or "thinking" in message
                        or "tool_calls" in message
                    )
                )
            ):
                out += self._payload(obj, "", at, len(line) + 1)
                continue
            text = obj.get("response") if message is None else message.get("content")
            if text and type(text) is str:
                out.append(OutputChunk(at, _CONTENT, text, len(line) + 1))
                if ex.first_created_at is None:
                    ex.first_created_at = nonempty_str(obj.get("created_at"))
        return out

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        chunks = chunks_of(native_pieces(obj), at, nbytes)
        if chunks and self.ex.first_created_at is None:
            self.ex.first_created_at = nonempty_str(obj.get("created_at"))
        if obj.get("done") is True:
            self.complete = True
            self.ex.final = obj
            native_stats(self.ex, obj)
        return chunks


class _ProgressReader(_NdjsonReader):
    """pull/push/create progress: no output, complete on {"status":"success"}."""

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if obj.get("status") == "success":
            self.complete = True
        return []


class _SseReader(Reader):
    """SSE framing; the event name is the `event:` field, else the payload's `type`."""

    _TERMINAL_DATA: bytes | None = None
    """A non-JSON data payload that ends the stream (OpenAI's `[DONE]`)."""

    def __init__(self, ex: Exchange) -> None:
        super().__init__(ex)
        self._events = SseSplitter()

    def feed(self, data: bytes, at: float) -> list[OutputChunk]:
        return self._read(self._events.feed(data), at)

    def close(self, at: float) -> list[OutputChunk]:
        out = self._read(self._events.flush(), at)
        self._gave_up(self._events.skipped)
        return out

    def _read(self, events: list[SseEvent], at: float) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        for event in events:
            if event.data == self._TERMINAL_DATA:
                self.complete = True
                continue
            obj = json_object(event.data)
            if obj is not None:
                name = event.event or nonempty_str(obj.get("type")) or ""
                out += self._payload(obj, name, at, event.nbytes)
        return out


class _OpenAIReader(_SseReader):
    """/v1/chat/completions and /v1/completions: deltas or `text`, usage, then `[DONE]`.

    With `stream_options.include_usage`, /v1/completions puts a zero `usage` on every chunk:
    only a non-zero usage replaces the one kept.
    """

    _TERMINAL_DATA: bytes | None = b"[DONE]"

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        usage = compat_usage(obj.get("usage"))
        if has_counts(usage):
            self.ex.usage = usage
        pieces: Pieces = []
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict):
                pieces += self._choice(choice)
        return chunks_of(pieces, at, nbytes)

    def _choice(self, choice: dict[str, Any]) -> Pieces:
        self.ex.done_reason = nonempty_str(choice.get("finish_reason")) or self.ex.done_reason
        delta = choice.get("delta")
        if isinstance(delta, dict):
            return output_pieces(
                delta.get("reasoning"), delta.get("content"), delta.get("tool_calls")
            )
        return output_pieces(None, choice.get("text"), None)


class _ResponsesReader(_SseReader):
    """/v1/responses: `response.*.delta` events are output; `response.completed` (or
    `response.incomplete`) ends the stream; `response.failed` and `error` are errors."""

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if name.startswith("response.") and name.endswith(".delta"):
            return chunks_of(responses_delta_pieces(name, obj.get("delta")), at, nbytes)
        response = dict_or_none(obj.get("response")) or {}
        if name in ("response.completed", "response.incomplete"):
            self.complete = True
            compat_stats(self.ex, response)
        elif name == "response.failed":
            self._fail(error_text(response) or "response failed")
        elif name == "error":
            self._fail(nonempty_str(obj.get("message")) or compact_json(obj))
        return []


class _AnthropicReader(_SseReader):
    """/v1/messages: `content_block_delta` is output, `message_delta` carries the real usage
    and stop_reason, `message_stop` ends the stream.

    message_start's `input_tokens` is Ollama's chars/4 estimate, not a count: it is never
    taken, so a stream cut before message_delta has no usage rather than a made-up one.
    """

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if name == "content_block_delta":
            return chunks_of(anthropic_delta_pieces(obj.get("delta")), at, nbytes)
        if name == "message_delta":
            delta = dict_or_none(obj.get("delta")) or {}
            self.ex.usage = compat_usage(obj.get("usage")) or self.ex.usage
            self.ex.done_reason = nonempty_str(delta.get("stop_reason")) or self.ex.done_reason
        elif name == "message_stop":
            self.complete = True
        return []


_SSE_READERS: Final[dict[str, type[_SseReader]]] = {
    "/v1/chat/completions": _OpenAIReader,
    "/v1/completions": _OpenAIReader,
    "/v1/responses": _ResponsesReader,
    "/v1/messages": _AnthropicReader,
}


class _ReplyReader(Reader):
    """A single JSON reply (or error body), kept up to `limit` bytes and parsed at close.

    Its content is not output (nothing was streamed): it lands on `ex.final`. A reply over
    the limit is dropped quietly and stays unparsed (`complete` False, `usage` None).
    """

    def __init__(self, ex: Exchange, limit: int) -> None:
        super().__init__(ex)
        self._limit = limit
        self._body: bytearray | None = bytearray()

    def feed(self, data: bytes, at: float) -> list[OutputChunk]:
        if self._body is None:
            return []
        if len(self._body) + len(data) > self._limit:
            self._body = None
        else:
            self._body += data
        return []

    def close(self, at: float) -> list[OutputChunk]:
        obj = json_object(self._body or b"")
        if obj is not None:
            self.complete = True
            self._payload(obj, "", at, 0)
        return []

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if (self.ex.status or 0) < 400 and self.ex.endpoint in _REPLY_ENDPOINTS:
            self.ex.final = obj
            if family_of(self.ex.endpoint) == "ollama":
                native_stats(self.ex, obj)
            else:
                compat_stats(self.ex, obj)
        return []

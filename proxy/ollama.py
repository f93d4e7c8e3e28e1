"""What Ollama's payloads mean: route templates, request fields, output pieces and final stats."""

from __future__ import annotations

import secrets
from typing import Any, Final, Literal
from urllib.parse import unquote

import orjson
from orjson import JSONDecodeError
from orjson import loads as _loads

from proxy.exchange import Exchange, Outcome, OutputChunk, OutputKind, RequestFields, Usage
from proxy.framing import LineSplitter, SseEvent, SseSplitter

Family = Literal["ollama", "openai", "anthropic"]

OTHER: Final = "other"
_BLOBS: Final = "/api/blobs/:digest"
_V1_MODEL: Final = "/v1/models/:model"
_AUDIO: Final = "/v1/audio/transcriptions"

NATIVE_GENERATION: Final = frozenset({"/api/generate", "/api/chat"})
INFERENCE_ENDPOINTS: Final = NATIVE_GENERATION | {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
}
EMBEDDING_ENDPOINTS: Final = frozenset({"/api/embed", "/api/embeddings", "/v1/embeddings"})
POLLING_ENDPOINTS: Final = frozenset(
    {"/", "/api/tags", "/api/ps", "/api/version", "/api/status", "/v1/models", _V1_MODEL}
)
MANAGEMENT_ENDPOINTS: Final = frozenset(
    {"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", _BLOBS}
)
ENDPOINTS: Final = (
    INFERENCE_ENDPOINTS
    | EMBEDDING_ENDPOINTS
    | POLLING_ENDPOINTS
    | MANAGEMENT_ENDPOINTS
    | {
        "/api/show",
        "/api/me",
        "/api/signout",
        "/api/experimental/web_search",
        "/api/experimental/web_fetch",
        "/api/experimental/model-recommendations",
        _AUDIO,
    }
)
"""Every route template `endpoint_of` can return, besides "other"."""

_PARAM_ROUTES: Final = {"/api/blobs/": _BLOBS, "/v1/models/": _V1_MODEL}
_STATIC_ROUTES: Final = ENDPOINTS - set(_PARAM_ROUTES.values())
_PROGRESS_ENDPOINTS: Final = frozenset({"/api/pull", "/api/push", "/api/create"})
_REPLY_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS

_NDJSON: Final = "application/x-ndjson"
_SSE: Final = "text/event-stream"
_JSON: Final = "application/json"

_MAX_ERROR_CHARS: Final = 4096
"""Error texts are cut here: they are logged and recorded with every exchange."""


def endpoint_of(path: str) -> str:
    """The route template Ollama's router would dispatch `path` to, else "other".

    `path` is the raw request path as sent (aiohttp's `raw_path`; anything from "?" on is
    ignored); it is percent-decoded once, as Go's `URL.Path` is, then matched exactly as gin does:
    case-sensitive, no trailing-slash stripping and no slash merging. Those variants never
    reach a handler upstream (gin answers a trailing slash with a 301/307 redirect to the
    bare route, Go's ServeMux redirects "//" paths to their clean form, other spellings get
    404), so the exchange is not an inference and counts as "other". A `:param` matches one
    non-empty segment.
    """
    path = unquote(path.partition("?")[0])
    if path in _STATIC_ROUTES:
        return path
    for prefix, template in _PARAM_ROUTES.items():
        param = path.removeprefix(prefix)
        if param != path and param and "/" not in param:
            return template
    return OTHER


def family_of(endpoint: str) -> Family:
    """Whose wire format a route speaks: Anthropic on /v1/messages, OpenAI on other /v1/*."""
    if endpoint == "/v1/messages":
        return "anthropic"
    return "openai" if endpoint.startswith("/v1/") else "ollama"


_OPENAI_ERROR_TYPES: Final = {400: "invalid_request_error", 404: "not_found_error"}
_ANTHROPIC_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
# Go's encoding/json escapes these; matching it keeps the proxy's bodies byte-identical.
_GO_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def error_body(family: Family, status: int, message: str) -> bytes:
    """An error body in the shape (and key order) Ollama uses on routes of `family`."""
    body: dict[str, Any]
    if family == "openai":
        kind = _OPENAI_ERROR_TYPES.get(status, "api_error")
        body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    elif family == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        body = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": f"req_{secrets.token_hex(12)}",
        }
    else:
        body = {"error": message}
    encoded = orjson.dumps(body)
    for raw, escaped in _GO_ESCAPES:
        encoded = encoded.replace(raw, escaped)
    return encoded


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def is_streamed(content_type: str) -> bool:
    """True iff the reply's media type is NDJSON or SSE (parameters ignored)."""
    return _media_type(content_type) in (_NDJSON, _SSE)


def tees_request_body(endpoint: str, content_type: str) -> bool:
    """Whether the request body is worth a bounded copy: known routes whose body is JSON.

    Ollama binds JSON whatever the Content-Type (so `curl -d` works), so the type only
    rules out multipart uploads; blob uploads and audio transcriptions are never JSON.
    """
    opaque = endpoint in (_BLOBS, _AUDIO) or _media_type(content_type).startswith("multipart/")
    return endpoint in ENDPOINTS and not opaque


def parse_request_fields(body: bytes, truncated: bool) -> RequestFields:
    """The fields the proxy reports from a request body; never raises.

    Keys match case-insensitively, as Go's encoding/json binds them. `model` falls back to
    the deprecated `name`; a field of the wrong JSON type is left None.
    """
    if truncated:
        return RequestFields(truncated=True)
    obj = _load_object(body)
    if obj is None:
        return RequestFields()
    fields = {key.lower(): value for key, value in obj.items()}
    return RequestFields(
        model=_str(fields.get("model")) or _str(fields.get("name")),
        stream=_bool(fields.get("stream")),
        options=_dict(fields.get("options")),
        think=fields.get("think"),
        keep_alive=fields.get("keep_alive"),
        format=fields.get("format"),
        raw=_bool(fields.get("raw")),
        parsed=True,
    )


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
    media = _media_type(ex.content_type)
    if media == _NDJSON and ex.endpoint in NATIVE_GENERATION:
        return _NativeStreamReader(ex)
    if media == _NDJSON and ex.endpoint in _PROGRESS_ENDPOINTS:
        return _ProgressReader(ex)
    if media == _SSE and ex.endpoint in _SSE_READERS:
        return _SSE_READERS[ex.endpoint](ex)
    if media == _JSON and (ex.endpoint in _REPLY_ENDPOINTS or (ex.status or 0) >= 400):
        return _ReplyReader(ex, reply_limit)
    return None


# --- JSON helpers: every payload field is untrusted, so each read checks its type.


def _load_object(data: bytes | bytearray) -> dict[str, Any] | None:
    try:
        obj = _loads(data)
    except JSONDecodeError:  # empty data too
        return None
    return obj if type(obj) is dict else None  # orjson makes no dict subclasses


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


_COUNT_MAX: Final = 2**63 - 1
"""Ollama's counts and durations are 64-bit; a larger number is no count (and no SQLite
integer, nor any Prometheus value worth keeping)."""


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value <= _COUNT_MAX:
        return None  # negative, past 64 bits, or NaN (which compares false)
    return int(value)


def _int(value: Any) -> int:
    return _count(value) or 0


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def _error_text(obj: dict[str, Any]) -> str | None:
    """The error message of `{"error": "..."}` (native) or `{"error": {"message": ...}}`
    (OpenAI, Anthropic), or None when `obj` is not an error."""
    error = obj.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) else _compact(error)
    return error if isinstance(error, str) else None


# --- What a payload means.

_Pieces = list[tuple[OutputKind, str]]
_CONTENT: Final = OutputKind.CONTENT
_NATIVE_DURATIONS: Final = (
    "total_duration",
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
)


def _pieces(thinking: Any, content: Any, tool_calls: Any) -> _Pieces:
    """Output pieces in reading order (thinking, content, then one per tool call)."""
    pieces: _Pieces = []
    if text := _str(thinking):
        pieces.append((OutputKind.THINKING, text))
    if text := _str(content):
        pieces.append((OutputKind.CONTENT, text))
    if isinstance(tool_calls, list):
        pieces.extend((OutputKind.TOOL_CALL, _compact(call)) for call in tool_calls)
    return pieces


def _chunks(pieces: _Pieces, at: float, nbytes: int) -> list[OutputChunk]:
    return [OutputChunk(at, kind, text, nbytes) for kind, text in pieces]


def _native_pieces(obj: dict[str, Any]) -> _Pieces:
    message = obj.get("message")
    if isinstance(message, dict):
        return _pieces(message.get("thinking"), message.get("content"), message.get("tool_calls"))
    return _pieces(obj.get("thinking"), obj.get("response"), obj.get("tool_calls"))


def reply_pieces(obj: dict[str, Any]) -> _Pieces:
    """The output of a whole, non-streamed reply — the single-reply counterpart of what
    the stream readers find in deltas — in any family's shape: native generate/chat,
    OpenAI chat or text completion, OpenAI Responses, Anthropic message."""
    choices = obj.get("choices")
    if isinstance(choices, list):
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if isinstance(message, dict):
            return _pieces(
                message.get("reasoning"), message.get("content"), message.get("tool_calls")
            )
        return _pieces(None, choice.get("text"), None)
    if isinstance(content := obj.get("content"), list):
        return [piece for block in content for piece in _block_pieces(block)]
    if isinstance(output := obj.get("output"), list):
        return [piece for item in output for piece in _item_pieces(item)]
    return _native_pieces(obj)


def _block_pieces(block: Any) -> _Pieces:
    """An Anthropic content block."""
    if not isinstance(block, dict):
        return []
    kind = block.get("type")
    if kind == "tool_use":
        return [(OutputKind.TOOL_CALL, _compact(block))]
    return _pieces(block.get("thinking"), block.get("text") if kind == "text" else None, None)


def _item_pieces(item: Any) -> _Pieces:
    """An OpenAI Responses output item."""
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    if kind == "function_call":
        return [(OutputKind.TOOL_CALL, _compact(item))]
    parts = item.get("summary") if kind == "reasoning" else item.get("content")
    texts = "".join(_str(p.get("text")) or "" for p in parts or [] if isinstance(p, dict))
    return _pieces(texts, None, None) if kind == "reasoning" else _pieces(None, texts, None)


def _native_usage(obj: dict[str, Any]) -> Usage:
    """Stats of a native final object; Ollama omits zero fields, so a missing one is 0.

    `has_timings` is True when at least one duration field is present, which excludes
    load/unload replies and `/api/embeddings` (they carry none).
    """
    return Usage(
        total_duration=_int(obj.get("total_duration")),
        load_duration=_int(obj.get("load_duration")),
        prompt_eval_count=_int(obj.get("prompt_eval_count")),
        prompt_eval_duration=_int(obj.get("prompt_eval_duration")),
        eval_count=_int(obj.get("eval_count")),
        eval_duration=_int(obj.get("eval_duration")),
        prompt_eval_cached_count=_count(obj.get("prompt_eval_cached_count")),
        has_timings=any(key in obj for key in _NATIVE_DURATIONS),
    )


def _native_stats(ex: Exchange, obj: dict[str, Any]) -> None:
    ex.done_reason = _str(obj.get("done_reason"))
    ex.usage = _native_usage(obj)
    ex.final_created_at = _str(obj.get("created_at"))


def _compat_usage(usage: Any) -> Usage | None:
    """Token counts from an OpenAI, Responses or Anthropic `usage` object (no timings).

    The cached count is `prompt_tokens_details.cached_tokens` (OpenAI) or
    `input_tokens_details.cached_tokens` (Responses), both part of the prompt count. Anthropic
    counts cache reads and writes apart from `input_tokens` (a disjoint partition), so they
    are added to the prompt count.
    """
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    if "cache_read_input_tokens" in usage:
        cached = _int(usage["cache_read_input_tokens"])
        prompt += cached + _int(usage.get("cache_creation_input_tokens"))
    return Usage(
        prompt_eval_count=prompt,
        eval_count=_int(usage.get("completion_tokens", usage.get("output_tokens"))),
        prompt_eval_cached_count=cached,
    )


def _nonzero(usage: Usage | None) -> bool:
    return usage is not None and bool(
        usage.prompt_eval_count or usage.eval_count or usage.prompt_eval_cached_count
    )


def _compat_done_reason(obj: dict[str, Any]) -> str | None:
    """finish_reason (OpenAI), stop_reason (Anthropic), or the Responses status/reason."""
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _str(choices[0].get("finish_reason"))
    details = obj.get("incomplete_details")
    if isinstance(details, dict):
        return _str(details.get("reason"))
    return _str(obj.get("stop_reason")) or _str(obj.get("status"))


def _compat_stats(ex: Exchange, obj: dict[str, Any]) -> None:
    ex.usage = _compat_usage(obj.get("usage")) or ex.usage
    ex.done_reason = _compat_done_reason(obj) or ex.done_reason


# --- Readers.


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

    def _fail(self, message: str) -> None:
        self.errored = True
        self.ex.error_message = message[:_MAX_ERROR_CHARS]

    def _payload(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        message = _error_text(obj)
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
        return self._read([tail] if tail else [], at)

    def _read(self, lines: list[bytes], at: float) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        for line in lines:
            obj = _load_object(line)
            if obj is not None:
                out += self._payload(obj, "", at, len(line) + 1)
        return out


class _NativeStreamReader(_NdjsonReader):
    """/api/generate and /api/chat streams: output on any line, stats on the done:true line.

    This is the proxy's hottest path (one call per token of every native stream), so the
    common line — one text piece, no error, thinking, tool calls or stats, not final — is
    read inline, `_load_object` included: the generic path costs several microseconds more
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
                    ex.first_created_at = _str(obj.get("created_at"))
        return out

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        chunks = _chunks(_native_pieces(obj), at, nbytes)
        if chunks and self.ex.first_created_at is None:
            self.ex.first_created_at = _str(obj.get("created_at"))
        if obj.get("done") is True:
            self.complete = True
            self.ex.final = obj
            _native_stats(self.ex, obj)
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
        return self._read(self._events.flush(), at)

    def _read(self, events: list[SseEvent], at: float) -> list[OutputChunk]:
        out: list[OutputChunk] = []
        for event in events:
            if event.data == self._TERMINAL_DATA:
                self.complete = True
                continue
            obj = _load_object(event.data)
            if obj is not None:
                name = event.event or _str(obj.get("type")) or ""
                out += self._payload(obj, name, at, event.nbytes)
        return out


class _OpenAIReader(_SseReader):
    """/v1/chat/completions and /v1/completions: deltas or `text`, usage, then `[DONE]`.

    With `stream_options.include_usage`, /v1/completions puts a zero `usage` on every chunk:
    only a non-zero usage replaces the one kept.
    """

    _TERMINAL_DATA: bytes | None = b"[DONE]"

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        usage = _compat_usage(obj.get("usage"))
        if _nonzero(usage):
            self.ex.usage = usage
        pieces: _Pieces = []
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict):
                pieces += self._choice(choice)
        return _chunks(pieces, at, nbytes)

    def _choice(self, choice: dict[str, Any]) -> _Pieces:
        self.ex.done_reason = _str(choice.get("finish_reason")) or self.ex.done_reason
        delta = choice.get("delta")
        if isinstance(delta, dict):
            return _pieces(delta.get("reasoning"), delta.get("content"), delta.get("tool_calls"))
        return _pieces(None, choice.get("text"), None)


class _ResponsesReader(_SseReader):
    """/v1/responses: `response.*.delta` events are output; `response.completed` (or
    `response.incomplete`) ends the stream; `response.failed` and `error` are errors."""

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if name.startswith("response.") and name.endswith(".delta"):
            return _chunks(_responses_piece(name, obj.get("delta")), at, nbytes)
        response = _dict(obj.get("response")) or {}
        if name in ("response.completed", "response.incomplete"):
            self.complete = True
            _compat_stats(self.ex, response)
        elif name == "response.failed":
            self._fail(_error_text(response) or "response failed")
        elif name == "error":
            self._fail(_str(obj.get("message")) or _compact(obj))
        return []


def _responses_piece(name: str, delta: Any) -> _Pieces:
    text = _str(delta)
    if text is None:
        return []
    if "reasoning" in name:
        return [(OutputKind.THINKING, text)]
    return [(OutputKind.TOOL_CALL if "_call" in name else OutputKind.CONTENT, text)]


_ANTHROPIC_DELTAS: Final = {
    "text_delta": ("text", OutputKind.CONTENT),
    "thinking_delta": ("thinking", OutputKind.THINKING),
    "input_json_delta": ("partial_json", OutputKind.TOOL_CALL),
}
"""Delta types that are output; signature and citation deltas carry no visible text."""


class _AnthropicReader(_SseReader):
    """/v1/messages: `content_block_delta` is output, `message_delta` carries the real usage
    and stop_reason, `message_stop` ends the stream.

    message_start's `input_tokens` is Ollama's chars/4 estimate, not a count: it is never
    taken, so a stream cut before message_delta has no usage rather than a made-up one.
    """

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if name == "content_block_delta":
            return _chunks(_anthropic_piece(obj.get("delta")), at, nbytes)
        if name == "message_delta":
            delta = _dict(obj.get("delta")) or {}
            self.ex.usage = _compat_usage(obj.get("usage")) or self.ex.usage
            self.ex.done_reason = _str(delta.get("stop_reason")) or self.ex.done_reason
        elif name == "message_stop":
            self.complete = True
        return []


def _anthropic_piece(delta: Any) -> _Pieces:
    if not isinstance(delta, dict) or delta.get("type") not in _ANTHROPIC_DELTAS:
        return []
    field, kind = _ANTHROPIC_DELTAS[delta["type"]]
    text = _str(delta.get(field))
    return [(kind, text)] if text else []


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
        obj = _load_object(self._body or b"")
        if obj is not None:
            self.complete = True
            self._payload(obj, "", at, 0)
        return []

    def _meaning(self, obj: dict[str, Any], name: str, at: float, nbytes: int) -> list[OutputChunk]:
        if (self.ex.status or 0) < 400 and self.ex.endpoint in _REPLY_ENDPOINTS:
            self.ex.final = obj
            if family_of(self.ex.endpoint) == "ollama":
                _native_stats(self.ex, obj)
            else:
                _compat_stats(self.ex, obj)
        return []

"""Media types and request bodies: whether a body is teed, and the fields read from it."""

from __future__ import annotations

from typing import Any, Final

from ollama_tap.exchange import Exchange, RequestFields
from ollama_tap.ollama.payloads import bool_or_none, dict_or_none, json_object, nonempty_str
from ollama_tap.ollama.routes import ENDPOINTS, OPAQUE_BODY_ENDPOINTS, family_of

NDJSON: Final = "application/x-ndjson"
SSE: Final = "text/event-stream"
JSON: Final = "application/json"


def media_type(content_type: str) -> str:
    """The media type of a Content-Type value: parameters dropped, lower case."""
    return content_type.partition(";")[0].strip().lower()


def is_streamed(content_type: str) -> bool:
    """True iff the reply's media type is NDJSON or SSE (parameters ignored)."""
    return media_type(content_type) in (NDJSON, SSE)


def tees_request_body(endpoint: str, content_type: str) -> bool:
    """Whether the request body is worth a bounded copy: known routes whose body is JSON.

    Ollama binds JSON whatever the Content-Type (so `curl -d` works), so the type only
    rules out multipart uploads; blob uploads and audio transcriptions are never JSON.
    """
    opaque = endpoint in OPAQUE_BODY_ENDPOINTS or media_type(content_type).startswith("multipart/")
    return endpoint in ENDPOINTS and not opaque


def parse_request_fields(body: bytes, truncated: bool) -> RequestFields:
    """The fields the proxy reports from a request body; never raises.

    Keys match case-insensitively, as Go's encoding/json binds them. `model` falls back to
    the deprecated `name`; a field of the wrong JSON type is left None.
    """
    if truncated:
        return RequestFields(truncated=True)
    obj = json_object(body)
    return RequestFields() if obj is None else request_fields(obj)


def request_fields(obj: dict[str, Any]) -> RequestFields:
    """The fields of a request body parsed as one JSON object (`parse_request_fields`)."""
    fields = {key.lower(): value for key, value in obj.items()}
    return RequestFields(
        model=nonempty_str(fields.get("model")) or nonempty_str(fields.get("name")),
        stream=bool_or_none(fields.get("stream")),
        options=dict_or_none(fields.get("options")),
        think=fields.get("think"),
        keep_alive=fields.get("keep_alive"),
        format=fields.get("format"),
        raw=bool_or_none(fields.get("raw")),
        parsed=True,
    )


def reads_runner_fields(endpoint: str) -> bool:
    """Whether Ollama reads `options`, `keep_alive`, `shift` and `truncate` from this route's
    body: only on the native API. The /v1 request structs have none of them
    (`openai/openai.go` `ChatCompletionRequest`, `CompletionRequest`, `EmbedRequest`;
    `openai/responses.go` `ResponsesRequest`; `anthropic/anthropic.go` `MessagesRequest`
    maps only max_tokens, temperature, top_p, top_k and stop_sequences), so there they
    are dropped unread, on every version that has the route (fb30760 and before)."""
    return family_of(endpoint) == "ollama"


def honoured_options(ex: Exchange) -> dict[str, Any] | None:
    """The request's `options` as Ollama applies them: None on a /v1 route."""
    return ex.request.options if reads_runner_fields(ex.endpoint) else None


def honoured_keep_alive(ex: Exchange) -> Any:
    """The request's `keep_alive` as Ollama applies it: None (unset) on a /v1 route."""
    return ex.request.keep_alive if reads_runner_fields(ex.endpoint) else None

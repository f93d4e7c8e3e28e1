"""Ollama's routes: the templates its router dispatches to, their sets, each one's wire family."""

from __future__ import annotations

from typing import Final, Literal
from urllib.parse import unquote

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
PROGRESS_ENDPOINTS: Final = frozenset({"/api/pull", "/api/push", "/api/create"})
"""Management routes that stream NDJSON progress."""
OPAQUE_BODY_ENDPOINTS: Final = frozenset({_BLOBS, _AUDIO})
"""Routes whose request body is never JSON: blob uploads and audio transcriptions."""
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

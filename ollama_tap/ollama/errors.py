"""The error bodies the proxy makes, in the shape Ollama uses on each family's routes."""

from __future__ import annotations

import secrets
from typing import Any, Final

import orjson

from ollama_tap.ollama.routes import Family

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
    return go_json(body)


def go_json(value: Any) -> bytes:
    """`value` as Go's encoding/json prints it: compact, in key order, `<>&` escaped."""
    encoded = orjson.dumps(value)
    for raw, escaped in _GO_ESCAPES:
        encoded = encoded.replace(raw, escaped)
    return encoded

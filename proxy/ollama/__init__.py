"""What Ollama's payloads mean: route templates, error shapes, request fields and reply readers."""

from __future__ import annotations

from proxy.ollama.errors import error_body
from proxy.ollama.payloads import reply_pieces
from proxy.ollama.readers import Reader, outcome_of, reader_for
from proxy.ollama.request import is_streamed, parse_request_fields, tees_request_body
from proxy.ollama.routes import (
    EMBEDDING_ENDPOINTS,
    ENDPOINTS,
    INFERENCE_ENDPOINTS,
    MANAGEMENT_ENDPOINTS,
    NATIVE_GENERATION,
    POLLING_ENDPOINTS,
    endpoint_of,
    family_of,
)

__all__ = [
    "EMBEDDING_ENDPOINTS",
    "ENDPOINTS",
    "INFERENCE_ENDPOINTS",
    "MANAGEMENT_ENDPOINTS",
    "NATIVE_GENERATION",
    "POLLING_ENDPOINTS",
    "Reader",
    "endpoint_of",
    "error_body",
    "family_of",
    "is_streamed",
    "outcome_of",
    "parse_request_fields",
    "reader_for",
    "reply_pieces",
    "tees_request_body",
]

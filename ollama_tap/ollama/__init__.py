"""What Ollama's payloads mean: route templates, error shapes, request fields and reply readers."""

from __future__ import annotations

from ollama_tap.ollama.errors import error_body
from ollama_tap.ollama.payloads import reply_pieces
from ollama_tap.ollama.readers import Reader, outcome_of, reader_for
from ollama_tap.ollama.request import is_streamed, parse_request_fields, tees_request_body
from ollama_tap.ollama.routes import (
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

"""What the proxy reads from a request: its fields, and whether to tee its body."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_tap import ollama

# --- Request fields.


def test_request_fields() -> None:
    body = (
        b'{"model":"llama3.2","stream":false,"options":{"num_ctx":8192},"think":"high",'
        b'"keep_alive":"5m","format":{"type":"object"},"raw":true,"prompt":"hi"}'
    )
    fields = ollama.parse_request_fields(body, truncated=False)
    assert fields.parsed
    assert not fields.truncated
    assert fields.model == "llama3.2"
    assert fields.stream is False
    assert fields.options == {"num_ctx": 8192}
    assert (fields.think, fields.keep_alive, fields.format, fields.raw) == (
        "high",
        "5m",
        {"type": "object"},
        True,
    )


@pytest.mark.parametrize(("body", "model"), [
    (b'{"name":"old"}', "old"),
    (b'{"model":"","name":"old"}', "old"),
    (b'{"MODEL":"upper"}', "upper"),
    (b'{"model":7}', None),
    (b"{}", None),
])  # fmt: skip
def test_model_field(body: bytes, model: str | None) -> None:
    fields = ollama.parse_request_fields(body, truncated=False)
    assert fields.parsed
    assert fields.model == model


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[1]", b'"x"', b"null", b"\xff\xfe", b'{"model":"a"', b"[" * 5000]
)
def test_unparseable_request_bodies(body: bytes) -> None:
    fields = ollama.parse_request_fields(body, truncated=False)
    assert not fields.parsed
    assert fields.model is None


def test_wrong_types_are_left_none() -> None:
    fields = ollama.parse_request_fields(b'{"stream":"no","options":[1],"raw":1}', False)
    assert fields.parsed
    assert (fields.stream, fields.options, fields.raw) == (None, None, None)


def test_truncated_body_is_unknown() -> None:
    fields = ollama.parse_request_fields(b'{"model":"a"', truncated=True)
    assert fields.truncated
    assert not fields.parsed
    assert fields.model is None


def test_huge_body() -> None:
    body = orjson.dumps({"model": "m", "images": ["A" * (8 << 20)]})
    assert ollama.parse_request_fields(body, truncated=False).model == "m"


@given(st.binary(max_size=200))
def test_request_parsing_never_raises(body: bytes) -> None:
    ollama.parse_request_fields(body, truncated=False)


@pytest.mark.parametrize(("content_type", "streamed"), [
    ("application/x-ndjson", True),
    ("Text/Event-Stream; charset=utf-8", True),
    ("application/json; charset=utf-8", False),
    ("", False),
    ("text/plain", False),
])  # fmt: skip
def test_is_streamed(content_type: str, streamed: bool) -> None:
    assert ollama.is_streamed(content_type) is streamed


@pytest.mark.parametrize(("endpoint", "content_type", "tee"), [
    ("/api/chat", "application/json", True),
    ("/api/generate", "application/x-www-form-urlencoded", True),
    ("/v1/messages", "", True),
    ("/api/blobs/:digest", "application/octet-stream", False),
    ("/v1/audio/transcriptions", "multipart/form-data; boundary=x", False),
    ("/api/chat", "multipart/form-data; boundary=x", False),
    ("other", "application/json", False),
])  # fmt: skip
def test_tees_request_body(endpoint: str, content_type: str, tee: bool) -> None:
    assert ollama.tees_request_body(endpoint, content_type) is tee

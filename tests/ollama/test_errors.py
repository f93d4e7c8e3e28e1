"""The proxy's own error bodies, in the shape of each route family."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from ollama_tap import ollama


def test_error_body_native() -> None:
    assert ollama.error_body("ollama", 502, "upstream down") == b'{"error":"upstream down"}'


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (404, "not_found_error"), (502, "api_error"),
])  # fmt: skip
def test_error_body_openai(status: int, kind: str) -> None:
    assert ollama.error_body("openai", status, "m") == (
        b'{"error":{"message":"m","type":"' + kind.encode() + b'","param":null,"code":null}}'
    )


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
    (404, "not_found_error"), (429, "rate_limit_error"), (503, "overloaded_error"),
    (529, "overloaded_error"), (502, "api_error"),
])  # fmt: skip
def test_error_body_anthropic(status: int, kind: str) -> None:
    body = ollama.error_body("anthropic", status, "m")
    expected = b'{"type":"error","error":{"type":"' + kind.encode() + b'","message":"m"},'
    assert body.startswith(expected)
    decoded: dict[str, Any] = orjson.loads(body)
    assert re.fullmatch(r"req_[0-9a-f]{24}", decoded["request_id"])


def test_error_body_escapes_like_go() -> None:
    body = ollama.error_body("ollama", 502, "<a> & \u2028")
    assert body == b'{"error":"\\u003ca\\u003e \\u0026 \\u2028"}'
    assert orjson.loads(body) == {"error": "<a> & \u2028"}

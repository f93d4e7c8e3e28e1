"""What a reply's payload means: its error message, output pieces and counts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ollama_tap import ollama
from tests.support.reading import make_exchange, ndjson, read

# --- Error bodies.

ERROR_BODIES = [
    ("/api/chat", 404, b'{"error":"model \'x\' not found"}', "model 'x' not found"),
    (
        "/v1/chat/completions",
        400,
        b'{"error":{"code":null,"message":"model not found","param":null,'
        b'"type":"invalid_request_error"}}',
        "model not found",
    ),
    (
        "/v1/messages",
        400,
        b'{"type":"error","error":{"type":"invalid_request_error","message":"bad"},'
        b'"request_id":"req_0123"}',
        "bad",
    ),
    ("/api/show", 404, b'{"error":"model \'y\' not found"}', "model 'y' not found"),
    ("/api/pull", 500, b'{"error":"boom"}', "boom"),
]


@pytest.mark.parametrize(("endpoint", "status", "body", "message"), ERROR_BODIES)
def test_error_bodies_of_all_three_shapes(
    endpoint: str, status: int, body: bytes, message: str
) -> None:
    ex = make_exchange(endpoint, "application/json", status)
    reader, out = read(ex, [body])
    assert out == []
    assert reader.errored
    assert ex.error_message == message
    assert ex.final is None
    assert ex.usage is None


def test_error_message_is_bounded() -> None:
    ex = make_exchange("/api/chat", "application/json", 500)
    read(ex, [orjson.dumps({"error": "x" * 100_000})])
    assert ex.error_message is not None
    assert len(ex.error_message) == 4096


def test_error_without_a_message_string_keeps_its_json() -> None:
    ex = make_exchange("/v1/chat/completions", "application/json", 500)
    read(ex, [b'{"error":{"code":"x"}}'])
    assert ex.error_message == '{"code":"x"}'


# --- Output pieces and counts.


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            {"model": "m", "response": "Hi", "thinking": "hmm", "done": True},
            [("thinking", "hmm"), ("content", "Hi")],
        ),
        (
            {"message": {"role": "assistant", "content": "",
                         "tool_calls": [{"function": {"name": "f"}}]}},
            [("tool_call", '{"function":{"name":"f"}}')],
        ),
        (
            {"choices": [{"message": {"role": "assistant", "content": "A", "reasoning": "R"}}]},
            [("thinking", "R"), ("content", "A")],
        ),
        ({"choices": [{"text": "T", "finish_reason": "stop"}]}, [("content", "T")]),
        ({"choices": []}, []),
        (
            {"content": [{"type": "thinking", "thinking": "Th"}, {"type": "text", "text": "X"},
                         {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            [("thinking", "Th"), ("content", "X"),
             ("tool_call", '{"type":"tool_use","id":"t","name":"f","input":{}}')],
        ),
        (
            {"output": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "S"}]},
                        {"type": "message", "content": [{"type": "output_text", "text": "O"}]}]},
            [("thinking", "S"), ("content", "O")],
        ),
    ],
    ids=["generate", "chat-tools", "openai-chat", "openai-text", "openai-empty", "anthropic",
         "responses"],
)  # fmt: skip
def test_reply_pieces_of_every_family(
    reply: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert [(str(kind), text) for kind, text in ollama.reply_pieces(reply)] == expected


def test_reply_pieces_tolerates_nulls() -> None:
    reply = {"output": [{"type": "message", "content": [{"type": "output_text", "text": None}]},
                        {"type": "reasoning", "summary": None}, None]}  # fmt: skip
    assert ollama.reply_pieces(reply) == []


def test_counts_outside_64_bits_or_negative_are_no_counts() -> None:
    # They would not fit a SQLite integer (the recorder) and mean nothing as counts.
    ex = make_exchange("/api/generate")
    final = (
        '{"model":"m","done":true,"eval_count":1e30,"prompt_eval_count":-3,'
        '"prompt_eval_cached_count":18446744073709551615,"total_duration":5,'
        '"eval_duration":9223372036854775807}'
    )
    read(ex, [ndjson(final)])
    assert ex.usage is not None
    assert (ex.usage.eval_count, ex.usage.prompt_eval_count) == (0, 0)
    assert ex.usage.prompt_eval_cached_count is None
    assert (ex.usage.total_duration, ex.usage.eval_duration) == (5, 2**63 - 1)

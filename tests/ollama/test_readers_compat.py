"""The readers of the compatibility streams: OpenAI, Responses and Anthropic."""

from __future__ import annotations

import pytest

from ollama_tap.exchange import Usage
from tests.support.ollama_replies import F12
from tests.support.reading import SSE, TOOL, C, T, make_exchange, pieces, read, sse

# --- OpenAI-compatible streams.


def test_f12_chat_completions_tail() -> None:
    ex = make_exchange("/v1/chat/completions", SSE)
    reader, out = read(ex, [F12])
    assert pieces(out) == [(C, "!")]
    assert out[0].nbytes == len(F12.split(b"\n\n")[0]) + 2
    assert reader.complete
    assert not reader.errored
    assert ex.done_reason == "stop"
    assert ex.usage == Usage(prompt_eval_count=11, eval_count=18)
    assert ex.first_created_at is None
    assert ex.final is None


def test_role_only_first_delta_is_not_output_and_reasoning_is_thinking() -> None:
    stream = sse(
        (None, '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
        (None, '{"choices":[{"index":0,"delta":{"role":"assistant","reasoning":"r"}}]}'),
        (None, '{"choices":[{"index":0,"delta":{"content":"c"}}]}'),
        (None, '{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_1","index":0,'
               '"type":"function","function":{"name":"f","arguments":"{}"}}]}}]}'),
    )  # fmt: skip
    ex = make_exchange("/v1/chat/completions", SSE)
    reader, out = read(ex, [stream])
    assert [chunk.kind for chunk in out] == [T, C, TOOL]
    assert not reader.complete


def test_completions_zero_usage_on_every_chunk_and_real_usage_at_the_end() -> None:
    zero = '"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}'
    stream = sse(
        (None, '{"object":"text_completion","choices":[{"text":"A","index":0,'
               f'"finish_reason":null}}],{zero}}}'),
        (None, '{"object":"text_completion","choices":[{"text":"B","index":0,'
               f'"finish_reason":null}}],{zero}}}'),
        (None, '{"object":"text_completion","choices":[{"text":"","index":0,'
               f'"finish_reason":"length"}}],{zero}}}'),
        (None, '{"object":"text_completion","choices":[],'
               '"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}'),
        (None, f'{{"object":"text_completion","choices":[],{zero}}}'),
        (None, "[DONE]"),
    )  # fmt: skip
    ex = make_exchange("/v1/completions", SSE)
    reader, out = read(ex, [stream])
    assert pieces(out) == [(C, "A"), (C, "B")]
    assert ex.usage == Usage(prompt_eval_count=4, eval_count=2)
    assert ex.done_reason == "length"
    assert reader.complete


def test_openai_error_chunk() -> None:
    ex = make_exchange("/v1/chat/completions", SSE)
    stream = sse((None, '{"error":{"message":"overloaded","type":"api_error"}}'))
    reader, out = read(ex, [stream])
    assert out == []
    assert reader.errored
    assert ex.error_message == "overloaded"


def test_ollama_mid_stream_error_shape_is_incomplete_not_errored() -> None:
    # Ollama's compat writer turns the error line into an empty chunk and stops.
    ex = make_exchange("/v1/chat/completions", SSE)
    stream = sse(
        (None, '{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'),
        (None, '{"model":"","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}'),
    )
    reader, out = read(ex, [stream])
    assert len(out) == 1
    assert not reader.complete
    assert not reader.errored


# --- Responses and Anthropic streams.


def responses_stream(final: str = "response.completed") -> bytes:
    usage = (
        '{"input_tokens":10,"output_tokens":5,"total_tokens":15,'
        '"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}'
    )
    return sse(
        ("response.created", '{"type":"response.created","sequence_number":0,"response":{}}'),
        ("response.in_progress", '{"type":"response.in_progress","sequence_number":1}'),
        ("response.output_item.added", '{"type":"response.output_item.added","item":{}}'),
        ("response.reasoning_summary_text.delta",
         '{"type":"response.reasoning_summary_text.delta","delta":"think"}'),
        ("response.output_text.delta", '{"type":"response.output_text.delta","delta":"Hel"}'),
        ("response.output_text.delta", '{"type":"response.output_text.delta","delta":""}'),
        ("response.output_text.delta", '{"type":"response.output_text.delta","delta":"lo"}'),
        ("response.function_call_arguments.delta",
         '{"type":"response.function_call_arguments.delta","delta":"{\\"a\\":1}"}'),
        ("response.output_text.done", '{"type":"response.output_text.done","text":"Hello"}'),
        (final, f'{{"type":"{final}","response":{{"status":"completed","usage":{usage}}}}}'),
    )  # fmt: skip


def test_responses_sequence() -> None:
    ex = make_exchange("/v1/responses", SSE)
    reader, out = read(ex, [responses_stream()])
    assert pieces(out) == [(T, "think"), (C, "Hel"), (C, "lo"), (TOOL, '{"a":1}')]
    assert reader.complete
    assert not reader.errored
    assert ex.usage == Usage(prompt_eval_count=10, eval_count=5, prompt_eval_cached_count=0)
    assert ex.done_reason == "completed"


def test_responses_event_name_from_payload_type_when_no_event_line() -> None:
    stream = b'data: {"type":"response.output_text.delta","delta":"x"}\n\n'
    _, out = read(make_exchange("/v1/responses", SSE), [stream])
    assert pieces(out) == [(C, "x")]


@pytest.mark.parametrize(("event", "data", "message"), [
    ("response.failed", '{"type":"response.failed","response":{"error":{"message":"m1"}}}', "m1"),
    ("error", '{"type":"error","code":"c","message":"m2","param":null}', "m2"),
])  # fmt: skip
def test_responses_errors(event: str, data: str, message: str) -> None:
    ex = make_exchange("/v1/responses", SSE)
    reader, _ = read(ex, [sse((event, data))])
    assert reader.errored
    assert not reader.complete
    assert ex.error_message == message


ANTHROPIC_START = (
    "message_start",
    '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
    '"model":"m","content":[],"usage":{"input_tokens":40,"output_tokens":0}}}',
)
ANTHROPIC_BODY = [
    ("content_block_start",
     '{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}'),
    ("content_block_delta",
     '{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}'),
    ("content_block_delta",
     '{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    ("content_block_start",
     '{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}'),
    ("content_block_delta",
     '{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":1}'),
    ("content_block_start",
     '{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t",'
     '"name":"f","input":{}}}'),
    ("content_block_delta",
     '{"type":"content_block_delta","index":2,'
     '"delta":{"type":"input_json_delta","partial_json":"{\\"city\\":\\"Tokyo\\"}"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":2}'),
]  # fmt: skip
ANTHROPIC_END = [
    ("message_delta",
     '{"type":"message_delta","delta":{"stop_reason":"tool_use"},'
     '"usage":{"input_tokens":12,"output_tokens":30}}'),
    ("message_stop", '{"type":"message_stop"}'),
]  # fmt: skip


def test_anthropic_sequence() -> None:
    ex = make_exchange("/v1/messages", SSE)
    reader, out = read(ex, [sse(ANTHROPIC_START, *ANTHROPIC_BODY, *ANTHROPIC_END)])
    assert pieces(out) == [(T, "hm"), (C, "Hi"), (TOOL, '{"city":"Tokyo"}')]
    assert reader.complete
    assert not reader.errored
    assert ex.usage == Usage(prompt_eval_count=12, eval_count=30)
    assert ex.done_reason == "tool_use"


def test_anthropic_estimate_is_never_taken_for_a_count() -> None:
    # message_start's input_tokens (40 here) is Ollama's chars/4 estimate: a stream cut
    # before message_delta has no usage, so metrics and records count no made-up tokens.
    ex = make_exchange("/v1/messages", SSE)
    reader, _ = read(ex, [sse(ANTHROPIC_START, *ANTHROPIC_BODY)])
    assert not reader.complete
    assert ex.usage is None


def test_anthropic_stream_without_input_tokens_leaves_the_prompt_count_unknown() -> None:
    # llama-server reports the prompt in message_start only; its message_delta counts the
    # output alone. The prompt is then unknown, not 0.
    ex = make_exchange("/v1/messages", SSE)
    delta = (
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":24}}'
    )
    end = [("message_delta", delta), ("message_stop", '{"type":"message_stop"}')]
    reader, _ = read(ex, [sse(ANTHROPIC_START, *ANTHROPIC_BODY, *end)])
    assert reader.complete
    assert ex.usage == Usage(prompt_eval_count=None, eval_count=24)


def test_anthropic_error_event() -> None:
    ex = make_exchange("/v1/messages", SSE)
    data = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    reader, _ = read(ex, [sse(ANTHROPIC_START, ("error", data))])
    assert reader.errored
    assert ex.error_message == "Overloaded"

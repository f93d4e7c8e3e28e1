"""What payloads mean: routes, error shapes, request fields and the stream readers."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import ollama
from proxy.exchange import Exchange, OutputChunk, OutputKind, Usage
from tests.support.exchanges import new_exchange

NDJSON = "application/x-ndjson"
SSE = "text/event-stream"
JSON = "application/json; charset=utf-8"
C, T, TOOL = OutputKind.CONTENT, OutputKind.THINKING, OutputKind.TOOL_CALL


def make_exchange(endpoint: str, content_type: str = NDJSON, status: int = 200) -> Exchange:
    return new_exchange(
        endpoint,
        id="test-1",
        started=100.0,
        started_wall=1_760_000_000.0,
        status=status,
        content_type=content_type,
    )


def read(
    ex: Exchange, pieces: list[bytes], limit: int = 1 << 20
) -> tuple[ollama.Reader, list[OutputChunk]]:
    """Feed `pieces` at times 101, 102, ... and close at 200."""
    reader = ollama.reader_for(ex, limit)
    assert reader is not None
    out: list[OutputChunk] = []
    for i, piece in enumerate(pieces):
        out += reader.feed(piece, 101.0 + i)
    out += reader.close(200.0)
    return reader, out


def ndjson(*objects: str) -> bytes:
    """Objects (pretty or compact JSON text) as compact NDJSON lines, as Ollama streams them."""
    return b"".join(orjson.dumps(orjson.loads(text)) + b"\n" for text in objects)


def sse(*events: tuple[str | None, str]) -> bytes:
    return b"".join(
        (f"event: {name}\n" if name else "").encode() + b"data: " + data.encode() + b"\n\n"
        for name, data in events
    )


def pieces(out: list[OutputChunk]) -> list[tuple[OutputKind, str]]:
    return [(chunk.kind, chunk.text) for chunk in out]


# --- Fixtures, verbatim from research/ollama-protocol.md §8.

F1 = """{
  "model": "llama3.2",
  "created_at": "2023-08-04T08:52:19.385406455-07:00",
  "response": "The",
  "done": false
}"""
F2 = """{
  "model": "llama3.2",
  "created_at": "2023-08-04T19:22:45.499127Z",
  "response": "",
  "done": true,
  "context": [1, 2, 3],
  "total_duration": 10706818083,
  "load_duration": 6338219291,
  "prompt_eval_count": 26,
  "prompt_eval_duration": 130079000,
  "eval_count": 259,
  "eval_duration": 4232710000
}"""
F3 = b"""{"model":"gemma4","created_at":"2025-10-26T17:15:24.097767Z","response":"That","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.109172Z","response":"'","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.121485Z","response":"s","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.132802Z","response":" a","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.143931Z","response":" fantastic","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.155176Z","response":" question","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:15:24.166576Z","response":"!","done":true, "done_reason": "stop"}
"""  # noqa: E501
F4 = b"""{"model":"gemma4","created_at":"2025-10-26T17:21:21.196249Z","response":" Yes","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:21:21.207235Z","response":".","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:21:21.219166Z","response":"I","done":false}
{"model":"gemma4","created_at":"2025-10-26T17:21:21.231094Z","response":"can","done":false}
{"error":"an error was encountered while running the model"}
"""  # noqa: E501
F5 = b"""{
  "model": "gemma4",
  "created_at": "2025-10-17T23:14:07.414671Z",
  "response": "Hello! How can I help you today?",
  "done": true,
  "done_reason": "stop",
  "total_duration": 174560334,
  "load_duration": 101397084,
  "prompt_eval_count": 11,
  "prompt_eval_duration": 13074791,
  "eval_count": 18,
  "eval_duration": 52479709
}"""
F6_TOOL = """{
  "model": "llama3.2",
  "created_at": "2025-07-07T20:22:19.184789Z",
  "message": {
    "role": "assistant",
    "content": "",
    "tool_calls": [
      {
        "function": {
          "name": "get_weather",
          "arguments": {
            "city": "Tokyo"
          }
        }
      }
    ]
  },
  "done": false
}"""
F6_FINAL = """{
  "model": "llama3.2",
  "created_at": "2025-07-07T20:22:19.19314Z",
  "message": {
    "role": "assistant",
    "content": ""
  },
  "done_reason": "stop",
  "done": true,
  "total_duration": 182242375,
  "load_duration": 41295167,
  "prompt_eval_count": 169,
  "prompt_eval_duration": 24573166,
  "eval_count": 15,
  "eval_duration": 115959084
}"""
F7_LOAD = b"""{
  "model": "llama3.2",
  "created_at": "2024-09-12T21:17:29.110811Z",
  "message": {
    "role": "assistant",
    "content": ""
  },
  "done_reason": "load",
  "done": true
}"""
F7_UNLOAD = b"""{
  "model": "llama3.2",
  "created_at": "2024-09-12T03:54:03.516566Z",
  "response": "",
  "done": true,
  "done_reason": "unload"
}"""
F8 = b"""{
  "model": "all-minilm",
  "embeddings": [
    [
      0.010071029, -0.0017594862, 0.05007221, 0.04692972, 0.054916814,
      0.008599704, 0.105441414, -0.025878139, 0.12958129, 0.031952348
    ]
  ],
  "total_duration": 14143917,
  "load_duration": 1019500,
  "prompt_eval_count": 8
}"""
F10 = b"""{"status":"quantizing F16 model to Q4_K_M","digest":"0","total":6433687776,"completed":12302}
{"status":"quantizing F16 model to Q4_K_M","digest":"0","total":6433687776,"completed":6433687552}
{"status":"verifying conversion"}
{"status":"creating new layer sha256:fb7f4f211b89c6c4928ff4ddb73db9f9c0cfca3e000c3e40d6cf27ddc6ca72eb"}
{"status":"writing manifest"}
{"status":"success"}
"""  # noqa: E501
F12 = b"""data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1760000000,"model":"m","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}

data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1760000000,"model":"m","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: {"id":"chatcmpl-42","object":"chat.completion.chunk","created":1760000000,"model":"m","system_fingerprint":"fp_ollama","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":18,"total_tokens":29}}

data: [DONE]

"""  # noqa: E501


# --- Native streams.


def test_f1_f2_generate_stream() -> None:
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [ndjson(F1, F2)])
    assert pieces(out) == [(C, "The")]
    assert out[0].at == 101.0
    assert out[0].nbytes == len(ndjson(F1))
    assert reader.complete
    assert not reader.errored
    assert ex.usage == Usage(
        total_duration=10706818083,
        load_duration=6338219291,
        prompt_eval_count=26,
        prompt_eval_duration=130079000,
        eval_count=259,
        eval_duration=4232710000,
        prompt_eval_cached_count=None,
        has_timings=True,
    )
    assert ex.final is not None
    assert ex.final["context"] == [1, 2, 3]
    assert ex.first_created_at == "2023-08-04T08:52:19.385406455-07:00"
    assert ex.final_created_at == "2023-08-04T19:22:45.499127Z"
    assert ex.done_reason is None


def test_f3_text_on_the_final_chunk_is_output() -> None:
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [F3])
    assert "".join(chunk.text for chunk in out) == "That's a fantastic question!"
    assert len(out) == 7
    assert reader.complete
    assert ex.done_reason == "stop"
    assert ex.usage is not None
    assert not ex.usage.has_timings


@pytest.mark.parametrize("size", [1, 7, 64])
def test_f3_in_any_piece_size(size: int) -> None:
    ex = make_exchange("/api/generate")
    _, out = read(ex, [F3[i : i + size] for i in range(0, len(F3), size)])
    assert "".join(chunk.text for chunk in out) == "That's a fantastic question!"


def test_f4_mid_stream_error_line() -> None:
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [F4])
    assert len(out) == 4
    assert reader.errored
    assert not reader.complete
    assert ex.error_message == "an error was encountered while running the model"
    assert ex.usage is None


def test_f6_tool_call_on_a_done_false_chunk() -> None:
    ex = make_exchange("/api/chat")
    reader, out = read(ex, [ndjson(F6_TOOL, F6_FINAL)])
    assert pieces(out) == [
        (TOOL, '{"function":{"name":"get_weather","arguments":{"city":"Tokyo"}}}')
    ]
    assert reader.complete
    assert ex.done_reason == "stop"
    assert ex.usage is not None
    assert (ex.usage.prompt_eval_count, ex.usage.eval_count) == (169, 15)
    assert ex.first_created_at == "2025-07-07T20:22:19.184789Z"


def test_tool_calls_on_the_final_chunk_are_output() -> None:
    final = orjson.loads(F6_FINAL)
    final["message"]["tool_calls"] = [{"id": "call_abc12345", "function": {"name": "f"}}]
    ex = make_exchange("/api/chat")
    reader, out = read(ex, [orjson.dumps(final) + b"\n"])
    assert [chunk.kind for chunk in out] == [TOOL]
    assert reader.complete
    assert ex.final == final


def test_thinking_only_first_chunk_and_mixed_chunk() -> None:
    lines = ndjson(
        '{"created_at":"t1","message":{"role":"assistant","content":"","thinking":"Hmm"},'
        '"done":false}',
        '{"created_at":"t2","message":{"role":"assistant","content":"Hi","thinking":" ok"},'
        '"done":false}',
        '{"created_at":"t3","message":{"role":"assistant","content":""},"done":true,'
        '"total_duration":5,"prompt_eval_cached_count":3}',
    )
    ex = make_exchange("/api/chat")
    _, out = read(ex, [lines])
    assert pieces(out) == [(T, "Hmm"), (T, " ok"), (C, "Hi")]
    assert out[1].nbytes == out[2].nbytes
    assert ex.first_created_at == "t1"
    assert ex.usage is not None
    assert ex.usage.prompt_eval_cached_count == 3


def test_generate_thinking_field_is_output() -> None:
    ex = make_exchange("/api/generate")
    _, out = read(ex, [ndjson('{"response":"","thinking":"x","done":false}')])
    assert pieces(out) == [(T, "x")]


def test_stream_without_a_final_object_is_incomplete() -> None:
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [F3.rsplit(b"\n", 2)[0] + b"\n"])
    assert len(out) == 6
    assert not reader.complete
    assert not reader.errored
    assert ex.final is None
    assert ex.usage is None


def test_final_line_without_newline_at_eof() -> None:
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [F3.rstrip(b"\n")])
    assert len(out) == 7
    assert reader.complete


def test_crlf_stream_in_any_pieces_reads_as_its_lf_form() -> None:
    # nbytes is the line without its "\r\n" plus one, as for an LF line.
    lf = ndjson(F1, F2)
    crlf = lf.replace(b"\n", b"\r\n")
    expected = [(c.kind, c.text, c.nbytes) for c in read(make_exchange("/api/generate"), [lf])[1]]
    for cut in range(len(crlf) + 1):
        ex = make_exchange("/api/generate")
        reader, out = read(ex, [crlf[:cut], crlf[cut:]])
        assert [(c.kind, c.text, c.nbytes) for c in out] == expected
        assert reader.complete
        assert ex.first_created_at == "2023-08-04T08:52:19.385406455-07:00"


def test_lines_that_only_look_like_plain_tokens_take_the_full_path() -> None:
    stream = (
        b"\n"
        b'[{"response":"list","done":false}]\n'
        b'{"response":"bad json",\n'
        b'{"created_at":"t1","message":"not an object","response":"r","done":false}\n'
        b'{"created_at":"t2","response":"d","done":0}\n'
        b'{"created_at":"t3","response":"","done":false}\n'
        b'{"response":"e","done":false,"error":"stopped"}\n'
    )
    ex = make_exchange("/api/generate")
    reader, out = read(ex, [stream])
    assert pieces(out) == [(C, "r"), (C, "d")]
    assert ex.first_created_at == "t1"
    assert reader.errored
    assert ex.error_message == "stopped"
    assert not reader.complete


def test_progress_stream_completes_on_success_without_output() -> None:
    ex = make_exchange("/api/create")
    reader, out = read(ex, [F10])
    assert out == []
    assert reader.complete
    assert not reader.errored


def test_progress_stream_error_line() -> None:
    ex = make_exchange("/api/pull")
    reader, _ = read(ex, [b'{"status":"pulling manifest"}\n{"error":"pull model manifest: 404"}\n'])
    assert reader.errored
    assert not reader.complete
    assert ex.error_message == "pull model manifest: 404"


# --- Single JSON replies.


def test_f5_single_generate_reply_is_not_output_but_final() -> None:
    ex = make_exchange("/api/generate", JSON)
    reader, out = read(ex, [F5[:50], F5[50:]])
    assert out == []
    assert reader.complete
    assert ex.final is not None
    assert ex.final["response"] == "Hello! How can I help you today?"
    assert ex.done_reason == "stop"
    assert ex.usage is not None
    assert ex.usage.eval_count == 18
    assert ex.usage.has_timings
    assert ex.first_created_at is None
    assert ex.final_created_at == "2025-10-17T23:14:07.414671Z"


@pytest.mark.parametrize(("endpoint", "body", "reason"), [
    ("/api/chat", F7_LOAD, "load"),
    ("/api/generate", F7_UNLOAD, "unload"),
])  # fmt: skip
def test_f7_load_and_unload_replies(endpoint: str, body: bytes, reason: str) -> None:
    ex = make_exchange(endpoint, JSON)
    reader, out = read(ex, [body])
    assert out == []
    assert reader.complete
    assert ex.done_reason == reason
    assert ex.usage == Usage()


def test_f8_embed_reply() -> None:
    ex = make_exchange("/api/embed", JSON)
    read(ex, [F8])
    assert ex.usage == Usage(
        total_duration=14143917, load_duration=1019500, prompt_eval_count=8, has_timings=True
    )


def test_reply_over_the_limit_is_given_up_quietly() -> None:
    ex = make_exchange("/api/generate", JSON)
    reader, out = read(ex, [F5[:100], F5[100:]], limit=len(F5) - 1)
    assert out == []
    assert not reader.complete
    assert ex.usage is None
    assert ex.final is None


def test_openai_single_reply() -> None:
    body = (
        b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,'
        b'"prompt_tokens_details":{"cached_tokens":4}}}'
    )
    ex = make_exchange("/v1/chat/completions", "application/json")
    reader, _ = read(ex, [body])
    assert reader.complete
    assert ex.done_reason == "length"
    assert ex.usage == Usage(prompt_eval_count=5, eval_count=7, prompt_eval_cached_count=4)
    assert ex.final is not None


def test_anthropic_single_reply_adds_cache_reads_to_the_prompt() -> None:
    body = (
        b'{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],'
        b'"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":9,'
        b'"cache_read_input_tokens":20}}'
    )
    ex = make_exchange("/v1/messages", "application/json")
    read(ex, [body])
    assert ex.done_reason == "end_turn"
    assert ex.usage == Usage(prompt_eval_count=23, eval_count=9, prompt_eval_cached_count=20)


def test_v1_embeddings_reply() -> None:
    body = b'{"object":"list","data":[],"model":"m","usage":{"prompt_tokens":6,"total_tokens":6}}'
    ex = make_exchange("/v1/embeddings", "application/json")
    read(ex, [body])
    assert ex.usage == Usage(prompt_eval_count=6)
    assert ex.done_reason is None


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


@pytest.mark.parametrize(("endpoint", "content_type", "status"), [
    ("/api/tags", "application/json; charset=utf-8", 200),
    ("/api/ps", "application/json; charset=utf-8", 200),
    ("/api/blobs/:digest", "", 201),
    ("/api/show", "application/json; charset=utf-8", 200),
    ("other", "text/plain", 404),
    ("/api/generate", "", 403),
    ("/api/generate", "text/plain; charset=utf-8", 200),
])  # fmt: skip
def test_nothing_to_read(endpoint: str, content_type: str, status: int) -> None:
    assert ollama.reader_for(make_exchange(endpoint, content_type, status), 1024) is None


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
    # §6.1: the compat writer turns the error line into an empty chunk and stops.
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


def test_anthropic_error_event() -> None:
    ex = make_exchange("/v1/messages", SSE)
    data = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    reader, _ = read(ex, [sse(ANTHROPIC_START, ("error", data))])
    assert reader.errored
    assert ex.error_message == "Overloaded"


# --- Malformed input never raises.

MALFORMED = [
    b"not json\n",
    b"\x00\xff\xfe garbage \x80\n",
    b"[1,2,3]\n",
    b'"a string"\n',
    b"null\n",
    b"\n\n",
    b'{"done":"yes","message":"not an object","response":5,"thinking":[]}\n',
    b'{"message":{"content":7,"thinking":null,"tool_calls":"x"},"done":false}\n',
    b'{"choices":"x","usage":[1]}\n',
    b'{"choices":[1,null,{"delta":[]},{"delta":{"content":{}}}],"usage":{"prompt_tokens":"x"}}\n',
    b'{"delta":7,"response":[],"usage":{"input_tokens":1.5,"prompt_tokens_details":3}}\n',
    b'{"error":null}\n{"error":7}\n',
    b'{"total_duration":"1","eval_count":true,"prompt_eval_cached_count":"x","done":true}\n',
    b"{" * 5000 + b"\n",
]
READER_CASES = [
    ("/api/generate", NDJSON),
    ("/api/chat", NDJSON),
    ("/api/pull", NDJSON),
    ("/v1/chat/completions", SSE),
    ("/v1/completions", SSE),
    ("/v1/responses", SSE),
    ("/v1/messages", SSE),
    ("/api/chat", "application/json"),
    ("/v1/messages", "application/json"),
]


def as_framing(line: bytes, content_type: str) -> bytes:
    if content_type == SSE:
        return b"event: content_block_delta\ndata: " + line.rstrip(b"\n") + b"\n\n"
    return line


@pytest.mark.parametrize(("endpoint", "content_type"), READER_CASES)
@pytest.mark.parametrize("line", MALFORMED)
def test_malformed_payloads_are_skipped(endpoint: str, content_type: str, line: bytes) -> None:
    ex = make_exchange(endpoint, content_type)
    reader, out = read(ex, [as_framing(line, content_type)])
    assert all(isinstance(chunk.text, str) for chunk in out)
    assert not reader.errored


@pytest.mark.parametrize(("endpoint", "content_type"), READER_CASES)
@given(data=st.binary(max_size=200), status=st.sampled_from([200, 500]))
def test_random_bytes_never_raise(
    endpoint: str, content_type: str, data: bytes, status: int
) -> None:
    read(make_exchange(endpoint, content_type, status), [data, data])


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


# --- Routes.

STATIC_ROUTES = sorted(ollama.ENDPOINTS - {"/api/blobs/:digest", "/v1/models/:model"})


@pytest.mark.parametrize("route", STATIC_ROUTES)
def test_every_static_route_is_its_own_template(route: str) -> None:
    assert ollama.endpoint_of(route) == route


@pytest.mark.parametrize(("path", "endpoint"), [
    ("/api/blobs/sha256:" + "a" * 64, "/api/blobs/:digest"),
    ("/v1/models/llama3.2:latest", "/v1/models/:model"),
    ("/v1/models/library/llama3", "other"),
    ("/v1/models/", "other"),
    ("/api/blobs/", "other"),
    ("/api/generate/", "other"),
    ("//api/chat", "other"),
    ("/API/chat", "other"),
    ("/api/chat?x=1", "/api/chat"),
    ("/api/%63hat", "/api/chat"),
    ("/api%2Fchat", "/api/chat"),
    ("/api/chat%zz", "other"),
    ("/api/stop", "other"),
    ("/metrics", "other"),
    ("", "other"),
    ("/v1/images/generations", "other"),
])  # fmt: skip
def test_odd_paths(path: str, endpoint: str) -> None:
    assert ollama.endpoint_of(path) == endpoint


def test_endpoint_groups() -> None:
    assert ollama.NATIVE_GENERATION < ollama.INFERENCE_ENDPOINTS
    assert "/v1/messages" in ollama.INFERENCE_ENDPOINTS
    groups = [
        ollama.INFERENCE_ENDPOINTS,
        ollama.EMBEDDING_ENDPOINTS,
        ollama.POLLING_ENDPOINTS,
        ollama.MANAGEMENT_ENDPOINTS,
    ]
    assert sum(len(group) for group in groups) == len(frozenset().union(*groups))
    assert frozenset().union(*groups) <= ollama.ENDPOINTS


@pytest.mark.parametrize(("endpoint", "family"), [
    ("/api/chat", "ollama"),
    ("/", "ollama"),
    ("other", "ollama"),
    ("/v1/chat/completions", "openai"),
    ("/v1/models/:model", "openai"),
    ("/v1/messages", "anthropic"),
])  # fmt: skip
def test_family_of(endpoint: str, family: str) -> None:
    assert ollama.family_of(endpoint) == family


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

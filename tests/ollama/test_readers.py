"""The native and single-reply readers: output pieces, outcome, usage and their limits."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_tap import ollama
from ollama_tap.exchange import Usage
from tests.support.ollama_replies import (
    F1,
    F2,
    F3,
    F4,
    F5,
    F6_FINAL,
    F6_TOOL,
    F7_LOAD,
    F7_UNLOAD,
    F8,
    F10,
)
from tests.support.reading import JSON, NDJSON, SSE, TOOL, C, T, make_exchange, ndjson, pieces, read

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


def test_legacy_embeddings_reply_counts_no_tokens_it_did_not_report() -> None:
    ex = make_exchange("/api/embeddings", JSON)
    reader, _ = read(ex, [b'{"embedding":[0.5,-0.25]}'])
    assert reader.complete
    assert ex.final == {"embedding": [0.5, -0.25]}
    assert ex.usage is None


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


# --- A line past MAX_LINE: relayed, never held whole, given up on and said so.


@pytest.mark.parametrize(
    ("endpoint", "content_type", "line", "final"),
    [
        (
            "/api/generate",
            NDJSON,
            b'{"response":"%s","done":false}\n',
            b'{"response":"","done":true,"eval_count":2}\n',
        ),
        (
            "/v1/chat/completions",
            SSE,
            b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n',
            b"data: [DONE]\n\n",
        ),
    ],
    ids=["ndjson", "sse"],
)
def test_a_line_past_the_cap_is_skipped_and_the_stream_read_on(
    endpoint: str, content_type: str, line: bytes, final: bytes
) -> None:
    from ollama_tap.framing import MAX_LINE

    ex = make_exchange(endpoint, content_type)
    piece = 64 * 1024
    huge = line % (b"x" * (MAX_LINE + piece))
    stream = [line % b"a", *(huge[i : i + piece] for i in range(0, len(huge), piece))]
    reader, out = read(ex, [*stream, line % b"b", final])
    assert pieces(out) == [(C, "a"), (C, "b")]  # the huge piece of output is not counted
    assert reader.complete and not reader.errored
    assert ex.error_message is not None and "not read" in ex.error_message

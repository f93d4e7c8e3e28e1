"""An exchange as attributes, without a proxy: error types, parameters, content shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from yarl import URL

from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind, RequestFields
from ollama_tap.otel import semconv as sc
from ollama_tap.otel.config import Semconv
from ollama_tap.otel.content import OUTPUT_CAP, input_attributes, output_attributes
from ollama_tap.otel.spans import common, error_type, request_parameters, server_attributes, wall_ns
from ollama_tap.recorder import Recorder
from tests.recorder.factory import make_settings
from tests.support.exchanges import new_exchange


@pytest.mark.parametrize(
    ("outcome", "status", "expected"),
    [
        (Outcome.OK, 200, None),
        (Outcome.UPSTREAM_ERROR, 404, "404"),
        (Outcome.UPSTREAM_UNREACHABLE, 502, "upstream_unreachable"),
        (Outcome.CLIENT_DISCONNECTED, 200, "client_disconnected"),
        (Outcome.STREAM_ERROR, 200, "stream_error"),
        (None, None, None),
    ],
)
def test_error_type(outcome: Outcome | None, status: int | None, expected: str | None) -> None:
    assert error_type(new_exchange(outcome=outcome, status=status)) == expected


def test_parameters_from_options_and_from_the_top_level() -> None:
    native = {"temperature": 0, "top_p": 1, "top_k": 40, "seed": 7, "num_predict": 128}
    assert request_parameters(native, None) == {
        sc.TEMPERATURE: 0.0, sc.TOP_P: 1.0, sc.TOP_K: 40, sc.SEED: 7, sc.MAX_TOKENS: 128,
    }  # fmt: skip
    assert request_parameters(None, {"max_completion_tokens": 9, "temperature": "hot"}) == {
        sc.MAX_TOKENS: 9
    }
    assert request_parameters({"temperature": True}, None) == {}  # a bool is no number


def test_wall_times_follow_the_monotonic_offsets() -> None:
    ex = Exchange("POST", "/api/chat", "", "/api/chat", "c", {}, started=100.0, started_wall=1e9)
    assert wall_ns(ex, 100.0) == 1_000_000_000 * 1_000_000_000
    assert wall_ns(ex, 100.25) - wall_ns(ex, 100.0) == 250_000_000


def test_inputs_of_each_family() -> None:
    generate = input_attributes({"prompt": "hi", "system": "be brief"})
    assert json.loads(generate[sc.INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert json.loads(generate[sc.SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "be brief"}]
    openai = input_attributes(
        {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ]}]}
    )  # fmt: skip
    parts = json.loads(openai[sc.INPUT_MESSAGES])[0]["parts"]
    assert parts == [{"type": "text", "content": "what is this"}, {"type": "image_url"}]
    assert "AAAA" not in openai[sc.INPUT_MESSAGES]
    responses = input_attributes({"input": "hello", "instructions": "terse"})
    assert json.loads(responses[sc.INPUT_MESSAGES])[0]["parts"][0]["content"] == "hello"
    assert sc.SYSTEM_INSTRUCTIONS in responses
    assert input_attributes({"model": "x"}) == {}


def kept(tmp_path: Path, ex: Exchange, *reads: list[OutputChunk]) -> Exchange:
    """The exchange's pieces kept as the recorder keeps them in `full` mode, which is where
    the span's output text comes from."""
    recorder = Recorder(make_settings(tmp_path, record="full"), CollectorRegistry())
    recorder.request(ex)
    for pieces in reads:
        recorder.chunks(ex, pieces)
    return ex


def test_output_joins_runs_and_cuts_at_the_cap(tmp_path: Path) -> None:
    ex = kept(
        tmp_path,
        new_exchange("/api/chat", streamed=True, done_reason="stop"),
        [OutputChunk(0, OutputKind.THINKING, "hm", 1)],
        [OutputChunk(0, OutputKind.CONTENT, t, 1) for t in ("a", "é")],
        [OutputChunk(0, OutputKind.TOOL_CALL, '{"f":1}', 1)],
        [OutputChunk(0, OutputKind.TOOL_CALL, '{"g":2}', 1)],
    )
    [message] = json.loads(output_attributes(ex)[sc.OUTPUT_MESSAGES])
    assert message == {
        "role": "assistant",
        "finish_reason": "stop",
        "parts": [
            {"type": "reasoning", "content": "hm"},
            {"type": "text", "content": "aé"},
            {"type": "tool_call", "arguments": '{"f":1}'},
            {"type": "tool_call", "arguments": '{"g":2}'},
        ],
    }
    big = kept(
        tmp_path,
        new_exchange("/api/chat", streamed=True),
        *[[OutputChunk(0, OutputKind.CONTENT, "x" * OUTPUT_CAP, 1)] for _ in range(3)],
    )
    [message] = json.loads(output_attributes(big)[sc.OUTPUT_MESSAGES])
    assert message["parts"] == [{"type": "text", "content": "x" * OUTPUT_CAP + "…"}]


def test_a_single_reply_output_comes_from_its_final_object() -> None:
    ex = new_exchange("/api/generate", final={"response": "blue", "done": True})
    [message] = json.loads(output_attributes(ex)[sc.OUTPUT_MESSAGES])
    assert message["parts"] == [{"type": "text", "content": "blue"}]
    assert output_attributes(new_exchange("/api/generate")) == {}


def test_spans_name_the_model_as_records_do_and_the_address_in_full_mode_only() -> None:
    """In every mode the spans name the model as the records do (a prompt pasted into
    `model` is `other`); outside `full` mode they carry no client address either."""
    pasted = "Summarise this contract for me: the parties agree"
    ex = new_exchange(
        client="10.0.0.7", status=200, request=RequestFields(model=pasted), final={"model": pasted}
    )
    upstream = URL("http://127.0.0.1:11434")
    private = {
        **common(ex, "chat", upstream, Semconv.DEFAULT),
        **server_attributes(ex, None, None, full=False),
    }
    assert private[sc.REQUEST_MODEL] == private[sc.RESPONSE_MODEL] == "other"
    assert sc.CLIENT_ADDRESS not in private
    assert pasted not in json.dumps(private)
    full = {**common(ex, "chat", upstream, Semconv.DEFAULT), **server_attributes(ex, None, None)}
    assert full[sc.REQUEST_MODEL] == "other" and full[sc.CLIENT_ADDRESS] == "10.0.0.7"
    assert pasted not in json.dumps(full)
    named = new_exchange(request=RequestFields(model="Llama3.2"), final={"model": "llama3.2"})
    attrs = {
        **common(named, "chat", upstream, Semconv.DEFAULT),
        **server_attributes(named, None, None),
    }
    assert (attrs[sc.REQUEST_MODEL], attrs[sc.RESPONSE_MODEL]) == (
        "Llama3.2:latest",
        "llama3.2:latest",
    )

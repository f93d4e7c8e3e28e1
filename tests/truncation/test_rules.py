"""The truncation rules as pure functions of an Exchange and the runtime context."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ollama_tap.exchange import Exchange, Outcome, Usage
from ollama_tap.facts import TruncationKind
from ollama_tap.ollama.version import parse_version
from ollama_tap.truncation.context import runtime_context
from ollama_tap.truncation.rules import (
    Runtime,
    judge,
    shift_limit,
    truncated_lengths,
)
from tests.support.exchanges import new_exchange

NOW = (0, 33, 0)


def finished(endpoint: str = "/api/chat", *, p: int, e: int = 5, **fields: Any) -> Exchange:
    body = fields.pop("body", None)
    ex = new_exchange(endpoint, status=200, outcome=Outcome.OK, done_reason="stop", **fields)
    ex.usage = Usage(prompt_eval_count=p, eval_count=e)
    ex.request_body = orjson.dumps(body) if body is not None else None
    return ex


@pytest.mark.parametrize(
    ("c", "keep", "limit"),
    # Ollama's TestContextShiftPromptLimit table, and values users reported.
    [
        (4096, 4, 2050),
        (4096, 5, 2051),
        (32768, 4, 16386),
        (32768, 5, 16387),
        (65536, 4, 32770),
        (8, 3, 6),
    ],
)
def test_the_shift_limit_matches_ollamas_tests(c: int, keep: int, limit: int) -> None:
    assert shift_limit(c, keep) == limit


def test_t1_is_version_gated() -> None:
    assert truncated_lengths(4096, None, NOW) == {2050, 2051}
    assert truncated_lengths(4096, None, None) == {2050, 2051}, "not read yet: current"
    assert truncated_lengths(4096, None, (0, 30, 5)) == {4095}
    assert truncated_lengths(4096, None, (0, 24, 0)) == {4096}
    assert truncated_lengths(4096, -1, NOW) == {4095}
    assert truncated_lengths(4096, 10, NOW) == {shift_limit(4096, 10), shift_limit(4096, 11)}
    assert parse_version("0.30.11-rc2") == (0, 30, 11) and parse_version("") is None


def test_t1_on_every_completion_route_but_not_with_media() -> None:
    for endpoint in ("/api/chat", "/v1/chat/completions", "/v1/messages", "/v1/responses"):
        verdict = judge(finished(endpoint, p=2050), Runtime(4096, NOW))
        assert verdict is not None and verdict.rule == "T1"
    with_image = finished(p=2050, body={"messages": [{"images": ["aGk="]}]})
    assert judge(with_image, Runtime(4096, NOW)) is None
    assert judge(finished(p=2050), Runtime(None, NOW)) is None, "no C, no T1"
    assert judge(finished(p=2049), Runtime(4096, NOW)) is None


def test_t2_reads_the_context_and_overrides_t1() -> None:
    untruncated = finished("/api/generate", p=2050, final={"context": list(range(2055))})
    assert judge(untruncated, Runtime(4096, NOW)) is None, "P == L by chance, context says no"
    cut = finished("/api/generate", p=2050, final={"context": list(range(5105))})
    verdict = judge(cut, Runtime(None, NOW))
    assert verdict is not None and (verdict.rule, verdict.tokens_lost) == ("T2", 3050)
    bos_drift = finished("/api/generate", p=100, final={"context": list(range(104))})
    assert judge(bos_drift, Runtime(4096, NOW)) is None


INNER = (
    '{"error":{"code":400,"message":"request (7912 tokens) exceeds the available context size '
    '(4096 tokens), try increasing it","type":"exceed_context_size_error",'
    '"n_prompt_tokens":7912,"n_ctx":4096}}'
)


@pytest.mark.parametrize(
    "message",
    [
        INNER,  # the raw llama-server body as a string (fb30760)
        # an object (newer servers), as error_text keeps an object without "message"
        '{"code":400,"type":"exceed_context_size_error","n_prompt_tokens":7912,"n_ctx":4096}',
        "request (7912 tokens) exceeds the available context size (4096 tokens), try increasing it",
        "input length (7912 tokens) exceeds the model's maximum context length (4096 tokens)",
    ],
)
def test_t3_parses_the_refusal_whatever_its_shape(message: str) -> None:
    ex = new_exchange(
        "/api/chat", status=400, outcome=Outcome.UPSTREAM_ERROR, error_message=message
    )
    verdict = judge(ex, Runtime(None, NOW))
    assert verdict is not None and verdict.kind is TruncationKind.REFUSED
    assert (verdict.prompt_tokens, verdict.context) == (7912, 4096)


def test_t3_names_c_and_the_padded_slot_it_was_refused_against() -> None:
    """llama-server's `n_ctx` is its slot, C padded to 256 (seen on v0.30.0: 512 for a
    num_ctx of 300): the verdict's context is C, as every other rule's, and its text names
    both; with C unknown, the slot is all there is."""
    message = INNER.replace("4096", "512")
    ex = new_exchange("/api/chat", status=400, error_message=message)
    verdict = judge(ex, Runtime(300, NOW))
    assert verdict is not None and (verdict.context, verdict.prompt_tokens) == (300, 7912)
    assert "(num_ctx 300, run in a slot of 512)" in verdict.explanation
    unknown = judge(ex, Runtime(None, NOW))
    assert unknown is not None and unknown.context == 512
    assert "runtime context (512)" in unknown.explanation
    same = judge(new_exchange("/api/chat", status=400, error_message=INNER), Runtime(4096, NOW))
    assert same is not None and "runtime context (4,096)" in same.explanation


def test_t3_other_refusals_and_non_refusals() -> None:
    for message in (
        "the prompt is longer than the context length currently available to the model; …",
        "the input length exceeds the context length",
    ):
        ex = new_exchange("/api/embed", status=400, error_message=message)
        assert judge(ex, Runtime(None, NOW)) is not None
    other = new_exchange("/api/chat", status=400, error_message="invalid options")
    assert judge(other, Runtime(4096, NOW)) is None
    server = new_exchange(
        "/api/chat", status=500, error_message="an error was encountered while running the model"
    )
    assert judge(server, Runtime(4096, NOW)) is None


def test_t7_t8_and_the_requested_limit() -> None:
    shift = judge(finished(p=3000, e=2000), Runtime(4096, NOW))
    assert shift is not None and shift.rule == "T7"
    runaway = finished(p=100, e=40960)
    runaway.done_reason = "length"
    verdict = judge(runaway, Runtime(4096, NOW))
    assert verdict is not None and "cap of 10" in verdict.explanation
    cut = finished(p=3000, e=1095)
    cut.done_reason = "length"
    verdict = judge(cut, Runtime(4096, NOW))
    assert verdict is not None and verdict.rule == "T8"
    asked = finished(p=3000, e=1095, body={"options": {"num_predict": 1095}})
    asked.done_reason = "length"
    assert judge(asked, Runtime(4096, NOW)) is None
    anthropic = finished("/v1/messages", p=3000, e=1095, body={"max_tokens": 1095})
    anthropic.done_reason = "max_tokens"
    assert judge(anthropic, Runtime(4096, NOW)) is None


def test_t9_single_inputs_only() -> None:
    one = finished("/api/embed", p=256, e=0, body={"input": "long text"})
    verdict = judge(one, Runtime(256, NOW))
    assert verdict is not None and verdict.kind is TruncationKind.EMBED_TRUNCATED
    many = finished("/api/embed", p=256, e=0, body={"input": ["a", "b"]})
    assert judge(many, Runtime(256, NOW)) is None


def test_runtime_context_only_errs_towards_too_large() -> None:
    assert runtime_context(None, 4096, reloaded=False) == 4096
    assert runtime_context(8192, 4096, reloaded=False) == 4096, "capped at the training context"
    assert runtime_context(8192, 4096, reloaded=True) == 8192, "/api/ps may predate the reload"
    assert runtime_context(2048, None, reloaded=False) == 2048
    assert runtime_context(None, None, reloaded=False) is None


@pytest.mark.parametrize("c", [2048, 4096])
def test_t1_false_positives_are_two_lengths_in_c(c: int) -> None:
    """Every untruncated chat prompt length from 1 to C − 1 (output 1 token, so no shift):
    T1 takes exactly the two lengths L(C,4) and L(C,5) for truncated ones, 2/C of them."""
    flagged = [p for p in range(1, c) if judge(finished(p=p, e=1), Runtime(c, NOW)) is not None]
    assert flagged == [shift_limit(c, 4), shift_limit(c, 5)]

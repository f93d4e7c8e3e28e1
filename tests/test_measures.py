"""The derived figures of the README's "Measurements", case by case, without a proxy."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ollama_tap.exchange import Exchange, Usage
from ollama_tap.measures import COLD_START_NS, cold_start, ctx_class, request_num_ctx, timings

SEC = 1_000_000_000
T0 = 100.0


@pytest.mark.parametrize(
    ("load_duration", "cold"),
    [(0, False), (SEC // 2, False), (COLD_START_NS, False), (COLD_START_NS + 1, True)],
)
def test_a_cold_start_is_a_load_over_a_second(load_duration: int, cold: bool) -> None:
    assert cold_start(Usage(load_duration=load_duration, has_timings=True)) is cold


@pytest.mark.parametrize(
    ("context_tokens", "label"),
    [
        (0, "le4k"),
        (4096, "le4k"),
        (4097, "le16k"),
        (16384, "le16k"),
        (16385, "le64k"),
        (65536, "le64k"),
        (65537, "gt64k"),
        (10**9, "gt64k"),
    ],
)
def test_ctx_class_by_context_size(context_tokens: int, label: str) -> None:
    assert ctx_class(context_tokens) == label


@pytest.mark.parametrize(
    ("options", "num_ctx"),
    [
        (None, None),
        ({}, None),
        ({"temperature": 0.5}, None),
        ({"num_ctx": None}, None),
        ({"num_ctx": 8192}, 8192),
        ({"num_ctx": 1}, 1),
        ({"num_ctx": 224.9}, 224),  # truncated, as Ollama reads a float
        ({"num_ctx": 1.0}, 1),
        ({"num_ctx": 0.5}, None),  # truncates to 0
        ({"num_ctx": 0}, None),
        ({"num_ctx": -4096}, None),
        ({"num_ctx": True}, None),
        ({"num_ctx": "4096"}, None),
        ({"num_ctx": [4096]}, None),
        ({"num_ctx": math.nan}, None),
        ({"num_ctx": math.inf}, None),
        ({"num_ctx": 2**63 - 1}, 2**63 - 1),
        ({"num_ctx": 2**63}, None),  # past 64 bits: no count
    ],
)
def test_the_requests_num_ctx(options: dict[str, Any] | None, num_ctx: int | None) -> None:
    assert request_num_ctx(options) == num_ctx


def _exchange(
    endpoint: str = "/api/generate",
    *,
    usage: Usage | None = None,
    ttft: float | None = None,
    first_created_at: str | None = None,
    final_created_at: str | None = None,
) -> Exchange:
    ex = Exchange("POST", endpoint, "", endpoint, "127.0.0.1", {}, started=T0)
    ex.usage = usage
    ex.first_output = ex.first_content = None if ttft is None else T0 + ttft
    ex.first_created_at, ex.final_created_at = first_created_at, final_created_at
    ex.ended = T0 + 3.5
    return ex


PHASES = Usage(
    total_duration=3 * SEC,
    load_duration=SEC // 2,
    prompt_eval_duration=SEC // 4,
    eval_duration=2 * SEC,
    has_timings=True,
)
"""3 s: load 0.5, prefill 0.25, decode 2, so 0.25 s of queue wait."""
NO_TIMES: dict[str, float | None] = dict.fromkeys(
    ("server_ttft", "client_overhead", "load", "queue_wait", "prefill", "decode", "total")
)
NATIVE_PHASES: dict[str, float | None] = {
    "load": 0.5,
    "queue_wait": 0.25,
    "prefill": 0.25,
    "decode": 2.0,
    "total": 3.0,
}
FINAL_AT = "2025-06-15T14:13:23.000000Z"
"""Ollama's clock at the end: the reply started 3 s (total_duration) earlier, at :20."""


@pytest.mark.parametrize(
    ("ex", "expected"),
    [
        pytest.param(_exchange(), NO_TIMES, id="no usage"),
        pytest.param(
            _exchange(usage=Usage(prompt_eval_count=8, eval_count=3), ttft=0.4),
            NO_TIMES,
            id="usage without timings (/v1)",
        ),
        pytest.param(
            _exchange(usage=PHASES),
            {**NO_TIMES, **NATIVE_PHASES},
            id="native phases",
        ),
        pytest.param(
            _exchange(usage=Usage(total_duration=SEC, load_duration=SEC, has_timings=True)),
            {
                **NO_TIMES,
                "load": 1.0,
                "queue_wait": 0.0,
                "prefill": 0.0,
                "decode": 0.0,
                "total": 1.0,
            },
            id="missing fields are 0",
        ),
        pytest.param(
            _exchange(
                usage=Usage(
                    total_duration=SEC, load_duration=SEC, eval_duration=SEC, has_timings=True
                )
            ),
            {
                **NO_TIMES,
                "load": 1.0,
                "queue_wait": 0.0,
                "prefill": 0.0,
                "decode": 1.0,
                "total": 1.0,
            },
            id="queue wait clamped at 0",
        ),
        pytest.param(
            _exchange("/api/embed", usage=PHASES),
            {**NO_TIMES, "load": 0.5, "total": 3.0},
            id="embeddings: no phases",
        ),
        pytest.param(
            _exchange(
                usage=PHASES,
                ttft=0.75,
                first_created_at="2025-06-15T14:13:20.500000Z",
                final_created_at=FINAL_AT,
            ),
            {**NATIVE_PHASES, "server_ttft": 0.5, "client_overhead": 0.25},
            id="server ttft and client overhead",
        ),
        pytest.param(
            _exchange(
                usage=PHASES,
                ttft=0.75,
                first_created_at="2025-06-15T07:13:20.500000123-07:00",
                final_created_at="2025-06-15T07:13:23.000000456-07:00",
            ),
            {**NATIVE_PHASES, "server_ttft": 0.5, "client_overhead": 0.25},
            id="local time and nanoseconds, as Ollama writes created_at",
        ),
        pytest.param(
            _exchange(
                usage=PHASES,
                ttft=0.25,
                first_created_at="2025-06-15T14:13:20.500000Z",
                final_created_at=FINAL_AT,
            ),
            {**NATIVE_PHASES, "server_ttft": 0.5, "client_overhead": -0.25},
            id="negative client overhead kept (two clocks)",
        ),
        pytest.param(
            _exchange(
                usage=PHASES,
                ttft=0.75,
                first_created_at="2025-06-15T14:13:19.500000Z",
                final_created_at=FINAL_AT,
            ),
            {**NATIVE_PHASES, "server_ttft": -0.5, "client_overhead": 1.25},
            id="negative server ttft kept",
        ),
        pytest.param(
            _exchange(
                usage=PHASES,
                first_created_at="2025-06-15T14:13:20.500000Z",
                final_created_at=FINAL_AT,
            ),
            {**NATIVE_PHASES, "server_ttft": 0.5},
            id="no client ttft (not streamed)",
        ),
        pytest.param(
            _exchange(usage=PHASES, ttft=0.75, final_created_at=FINAL_AT),
            {**NATIVE_PHASES},
            id="no first created_at",
        ),
        pytest.param(
            _exchange(usage=PHASES, ttft=0.75, first_created_at="2025-06-15T14:13:20Z"),
            {**NATIVE_PHASES},
            id="no final created_at",
        ),
        pytest.param(
            _exchange(
                usage=PHASES, ttft=0.75, first_created_at="yesterday", final_created_at=FINAL_AT
            ),
            {**NATIVE_PHASES},
            id="created_at that is no time",
        ),
        pytest.param(
            _exchange(usage=PHASES, ttft=0.75, first_created_at="", final_created_at=FINAL_AT),
            {**NATIVE_PHASES},
            id="empty created_at",
        ),
    ],
)
def test_timings(ex: Exchange, expected: dict[str, float | None]) -> None:
    client = {"ttft": ex.ttft, "ttfc": ex.ttfc, "duration": 3.5}
    want = {**NO_TIMES, **expected, **client}
    got = timings(ex)
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name] == (None if value is None else pytest.approx(value, abs=1e-6)), name

"""The metrics observer, driven hook by hook with Exchanges at fixed times."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind, Usage
from ollama_tap.metrics.observer import MetricsObserver, metrics_handler
from ollama_tap.names import ModelLabels
from tests.support.exchanges import new_exchange
from tests.support.samples import sample_value

T0 = 100.0
SEC = 1_000_000_000
GEN = {"endpoint": "/api/generate", "model": "llama3.2:latest"}
GEN_S = {**GEN, "stream": "true"}
RESPONSE_OUTCOMES = {Outcome.OK, Outcome.UPSTREAM_ERROR, Outcome.STREAM_ERROR, Outcome.INCOMPLETE}


class FakeModels:
    """Stands in for the poller: runtime contexts by raw name, a count of pokes, and the
    contexts the /api/ps read a poke makes will find (`after_poke`)."""

    def __init__(self, contexts: dict[str, int] | None = None) -> None:
        self.contexts = contexts or {}
        self.after_poke: dict[str, int] = {}
        self.pokes = 0
        self.waiting: list[Callable[[], None]] = []

    def context_length(self, model: str | None) -> int | None:
        return self.contexts.get(model or "")

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        # The poller's read is asynchronous: it ends when the test says (`read_ps`).
        self.pokes += 1
        if then is not None:
            self.waiting.append(then)

    def read_ps(self) -> None:
        self.contexts.update(self.after_poke)
        waiting, self.waiting = self.waiting, []
        for then in waiting:
            then()


def native_usage(**overrides: Any) -> Usage:
    """3 s total: load 0.5, prefill 0.5 (20 of 26 prompt tokens new), decode 1.5 (30 tokens)."""
    fields: dict[str, Any] = {
        "total_duration": 3 * SEC,
        "load_duration": SEC // 2,
        "prompt_eval_count": 26,
        "prompt_eval_duration": SEC // 2,
        "eval_count": 30,
        "eval_duration": 3 * SEC // 2,
        "prompt_eval_cached_count": 6,
        "has_timings": True,
    }
    fields.update(overrides)
    return Usage(**fields)


def make_exchange(
    endpoint: str = "/api/generate",
    model: str | None = "llama3.2",
    *,
    streamed: bool = True,
    status: int | None = 200,
    outcome: Outcome = Outcome.OK,
    usage: Usage | None = None,
    done_reason: str | None = "stop",
    options: dict[str, Any] | None = None,
) -> Exchange:
    ex = new_exchange(endpoint, started=T0, started_wall=1_700_000_000.0)
    ex.request.model, ex.request.options = model, options
    ex.status, ex.streamed, ex.outcome = status, streamed, outcome
    ex.usage, ex.done_reason = usage, done_reason
    return ex


class Harness:
    def __init__(self, models: FakeModels | None = None, cap: int = 100) -> None:
        self.registry = CollectorRegistry()
        self.labels = ModelLabels(cap)
        self.labels.set_known("tags", ["llama3.2:latest", "all-minilm:latest"])
        self.models = models or FakeModels()
        self.observer = MetricsObserver(self.registry, self.labels, self.models)

    def run(self, ex: Exchange, chunks: Iterable[float] = (), end: float = T0 + 4.0) -> Exchange:
        """Fire the hooks as the relay would: request, chunks at the given times, end."""
        self.observer.request(ex)
        for at in chunks:
            pieces = [OutputChunk(at=at, kind=OutputKind.CONTENT, text="x", nbytes=60)]
            ex.note_outputs(pieces)
            self.observer.chunks(ex, pieces)
        ex.ended = end
        if ex.outcome in RESPONSE_OUTCOMES:
            self.observer.response(ex)
        else:
            self.observer.error(ex)
        return ex

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return sample_value(self.registry, name, labels)

    def count(self, name: str, labels: dict[str, str]) -> float | None:
        return self.value(f"ollama_tap_{name}_count", labels)

    def total(self, name: str, labels: dict[str, str]) -> float | None:
        return self.value(f"ollama_tap_{name}_sum", labels)


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_native_stream_fills_every_family(h: Harness) -> None:
    ex = make_exchange(usage=native_usage(), options={"num_ctx": 112})
    h.run(ex, chunks=[T0 + 1.0, T0 + 1.25, T0 + 1.5, T0 + 2.0])
    assert h.value("ollama_tap_requests_total", {**GEN, "status": "200"}) == 1
    assert h.value("ollama_tap_requests_in_flight", GEN) == 0
    assert h.value("ollama_tap_responses_total", {**GEN, "done_reason": "stop"}) == 1
    assert h.total("request_duration_seconds", GEN_S) == 4.0
    assert h.total("time_to_first_token_seconds", GEN) == 1.0
    assert h.total("time_to_first_content_seconds", GEN) == 1.0
    assert h.count("inter_token_latency_seconds", GEN) == 3
    assert h.total("inter_token_latency_seconds", GEN) == 1.0
    assert h.total("observed_output_rate", GEN) == 3.0
    assert h.total("load_duration_seconds", GEN_S) == 0.5
    assert h.total("queue_wait_seconds", GEN_S) == 0.5
    assert h.total("prompt_eval_duration_seconds", GEN_S) == 0.5
    assert h.total("eval_duration_seconds", GEN_S) == 1.5
    assert h.total("decode_tokens_per_second", GEN) == 20.0
    assert h.total("prefill_tokens_per_second", GEN) == 40.0
    pair = {"model": "llama3.2:latest"}
    assert h.value("ollama_tap_decode_tokens_total", {**pair, "ctx": "le4k"}) == 30
    assert h.value("ollama_tap_decode_seconds_total", {**pair, "ctx": "le4k"}) == 1.5
    assert h.value("ollama_tap_prefill_tokens_total", pair) == 20
    assert h.value("ollama_tap_prefill_seconds_total", pair) == 0.5
    assert h.value("ollama_tap_prompt_tokens_total", GEN) == 26
    assert h.value("ollama_tap_prompt_cached_tokens_total", GEN) == 6
    assert h.value("ollama_tap_generation_tokens_total", GEN) == 30
    assert h.total("context_tokens", GEN) == 56
    assert h.total("context_utilization_ratio", GEN) == 0.5
    assert h.value("ollama_tap_request_errors_total", {**GEN, "kind": "ok"}) is None


def test_queue_wait_is_clamped_at_zero(h: Harness) -> None:
    h.run(make_exchange(usage=native_usage(total_duration=2 * SEC)))
    assert h.count("queue_wait_seconds", GEN_S) == 1
    assert h.total("queue_wait_seconds", GEN_S) == 0


@pytest.mark.parametrize(
    ("eval_count", "eval_duration", "rate", "pair"),
    [
        (1, SEC, False, True),
        (30, 0, False, False),
        (0, 0, False, False),
        (5, SEC // 2000, False, True),
        (2, SEC // 1000, True, True),
    ],
)
def test_decode_guards(
    h: Harness, eval_count: int, eval_duration: int, rate: bool, pair: bool
) -> None:
    usage = native_usage(eval_count=eval_count, eval_duration=eval_duration)
    h.run(make_exchange(usage=usage))
    assert (h.count("decode_tokens_per_second", GEN) or 0) == (1 if rate else 0)
    tokens = h.registry.get_sample_value(
        "ollama_tap_decode_tokens_total", {"model": "llama3.2:latest", "ctx": "le4k"}
    )
    assert (tokens or 0) == (eval_count if pair else 0)


@pytest.mark.parametrize(
    ("cached", "observed"),
    [(None, False), (26, False), (0, True), (25, True)],
)
def test_prefill_needs_the_cached_count(h: Harness, cached: int | None, observed: bool) -> None:
    h.run(make_exchange(usage=native_usage(prompt_eval_cached_count=cached)))
    assert (h.count("prefill_tokens_per_second", GEN) or 0) == (1 if observed else 0)
    pair = h.value("ollama_tap_prefill_seconds_total", {"model": "llama3.2:latest"})
    assert (pair or 0) == (0.5 if observed else 0)
    cached_tokens = h.value("ollama_tap_prompt_cached_tokens_total", GEN)
    assert cached_tokens == (None if cached is None else cached)


def test_prefill_with_zero_duration_is_not_a_rate(h: Harness) -> None:
    h.run(make_exchange(usage=native_usage(prompt_eval_duration=0)))
    assert h.count("prefill_tokens_per_second", GEN) is None


@pytest.mark.parametrize(
    ("prompt", "ctx"),
    [(4066, "le4k"), (4067, "le16k"), (16354, "le16k"), (65506, "le64k"), (65507, "gt64k")],
)
def test_ctx_class_from_context_size(h: Harness, prompt: int, ctx: str) -> None:
    h.run(make_exchange(usage=native_usage(prompt_eval_count=prompt)))
    labels = {"model": "llama3.2:latest", "ctx": ctx}
    assert h.value("ollama_tap_decode_tokens_total", labels) == 30


def test_utilization_from_the_poller_when_the_request_sets_no_num_ctx() -> None:
    h = Harness(FakeModels({"llama3.2": 224}))
    h.run(make_exchange(usage=native_usage()))
    assert h.total("context_utilization_ratio", GEN) == 0.25


def test_utilization_after_a_load_waits_for_the_new_num_ctx() -> None:
    # Reloaded for this reply from num_ctx 32768 to 224: the last /api/ps still says 32768,
    # so the ratio is taken after the read the load asks for (56 / 224, not 56 / 32768).
    models = FakeModels({"llama3.2": 32768})
    models.after_poke = {"llama3.2": 224}
    h = Harness(models)
    h.run(make_exchange(usage=native_usage(load_duration=2 * SEC, total_duration=5 * SEC)))
    assert models.pokes == 1
    assert h.count("context_utilization_ratio", GEN) is None  # not from the stale 32768
    models.read_ps()
    assert h.total("context_utilization_ratio", GEN) == 0.25


@pytest.mark.parametrize(("num_ctx", "ratio"), [(224.0, 0.25), (224.9, 0.25), (0.5, None)])
def test_a_float_num_ctx_is_read_as_ollama_reads_it(num_ctx: float, ratio: float | None) -> None:
    h = Harness(FakeModels())
    h.run(make_exchange(usage=native_usage(), options={"num_ctx": num_ctx}))  # truncated
    assert h.total("context_utilization_ratio", GEN) == ratio


def test_request_num_ctx_wins_over_the_poller() -> None:
    h = Harness(FakeModels({"llama3.2": 224}))
    h.run(make_exchange(usage=native_usage(), options={"num_ctx": 28}))
    assert h.total("context_utilization_ratio", GEN) == 2.0


@pytest.mark.parametrize("options", [None, {"num_ctx": True}, {"num_ctx": "4096"}, {"num_ctx": 0}])
def test_no_utilization_without_a_known_num_ctx(h: Harness, options: dict[str, Any]) -> None:
    h.run(make_exchange(usage=native_usage(), options=options))
    assert h.count("context_tokens", GEN) == 1
    assert h.count("context_utilization_ratio", GEN) is None


@pytest.mark.parametrize("reason", ["load", "unload"])
def test_load_and_unload_count_only_as_responses(h: Harness, reason: str) -> None:
    h.run(make_exchange(streamed=False, usage=Usage(), done_reason=reason))
    assert h.value("ollama_tap_responses_total", {**GEN, "done_reason": reason}) == 1
    assert h.value("ollama_tap_requests_total", {**GEN, "status": "200"}) == 1
    for family in ("request_duration_seconds", "load_duration_seconds", "eval_duration_seconds"):
        assert h.count(family, {**GEN, "stream": "false"}) is None
    assert h.value("ollama_tap_generation_tokens_total", GEN) is None


def test_time_to_first_token_is_for_streams_only(h: Harness) -> None:
    ex = make_exchange(streamed=False, usage=native_usage())
    ex.first_output = ex.first_content = ex.last_output = T0 + 3.0
    ex.output_events = 1
    h.run(ex)
    assert h.count("time_to_first_token_seconds", GEN) is None
    assert h.count("observed_output_rate", GEN) is None
    assert h.count("request_duration_seconds", {**GEN, "stream": "false"}) == 1
    assert h.count("eval_duration_seconds", {**GEN, "stream": "false"}) == 1


def test_time_to_first_content_waits_for_content(h: Harness) -> None:
    ex = make_exchange()
    ex.first_output, ex.first_content = T0 + 0.5, T0 + 2.5
    h.run(ex)
    assert h.total("time_to_first_token_seconds", GEN) == 0.5
    assert h.total("time_to_first_content_seconds", GEN) == 2.5


def test_one_output_event_has_no_observed_rate(h: Harness) -> None:
    h.run(make_exchange(), chunks=[T0 + 1.0])
    assert h.count("observed_output_rate", GEN) is None
    assert h.count("inter_token_latency_seconds", GEN) is None


def test_openai_usage_counts_tokens_but_no_phases(h: Harness) -> None:
    usage = Usage(prompt_eval_count=11, eval_count=18, prompt_eval_cached_count=4)
    ex = make_exchange("/v1/chat/completions", usage=usage)
    h.run(ex, chunks=[T0 + 1.0, T0 + 1.5, T0 + 2.0])
    v1 = {"endpoint": "/v1/chat/completions", "model": "llama3.2:latest"}
    assert h.value("ollama_tap_prompt_tokens_total", v1) == 11
    assert h.value("ollama_tap_prompt_cached_tokens_total", v1) == 4
    assert h.value("ollama_tap_generation_tokens_total", v1) == 18
    assert h.total("observed_output_rate", v1) == 2.0
    assert h.total("time_to_first_token_seconds", v1) == 1.0
    assert h.count("load_duration_seconds", {**v1, "stream": "true"}) is None
    assert h.count("decode_tokens_per_second", v1) is None
    assert h.count("context_tokens", v1) is None
    assert (
        h.value("ollama_tap_decode_tokens_total", {"model": "llama3.2:latest", "ctx": "le4k"})
        is None
    )


def test_embeddings_count_duration_load_and_prompt_tokens() -> None:
    h = Harness()
    usage = Usage(total_duration=SEC, load_duration=SEC // 4, prompt_eval_count=8, has_timings=True)
    h.run(make_exchange("/api/embed", "all-minilm", streamed=False, usage=usage, done_reason=None))
    emb = {"endpoint": "/api/embed", "model": "all-minilm:latest"}
    assert h.count("request_duration_seconds", {**emb, "stream": "false"}) == 1
    assert h.total("load_duration_seconds", {**emb, "stream": "false"}) == 0.25
    assert h.value("ollama_tap_prompt_tokens_total", emb) == 8
    for family in ("queue_wait_seconds", "prompt_eval_duration_seconds", "eval_duration_seconds"):
        assert h.count(family, {**emb, "stream": "false"}) is None
    assert h.count("context_tokens", emb) is None
    assert h.count("decode_tokens_per_second", emb) is None


def test_cold_start_is_counted_and_pokes_the_poller(h: Harness) -> None:
    h.run(make_exchange(usage=native_usage(load_duration=2 * SEC, total_duration=5 * SEC)))
    h.run(make_exchange(usage=native_usage()))
    assert h.value("ollama_tap_cold_starts_total", {"model": "llama3.2:latest"}) == 1
    assert h.models.pokes == 1


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_but_ok_is_an_error_kind(h: Harness, outcome: Outcome) -> None:
    h.run(make_exchange(outcome=outcome, status=None))
    errors = h.value("ollama_tap_request_errors_total", {**GEN, "kind": outcome.value})
    assert errors == (None if outcome is Outcome.OK else 1)
    assert h.value("ollama_tap_requests_total", {**GEN, "status": ""}) == 1
    assert h.value("ollama_tap_requests_in_flight", GEN) == 0


def test_in_flight_counts_until_the_end(h: Harness) -> None:
    first, second = make_exchange(), make_exchange()
    h.observer.request(first)
    h.observer.request(second)
    assert h.value("ollama_tap_requests_in_flight", GEN) == 2
    first.outcome, first.ended = Outcome.UPSTREAM_UNREACHABLE, T0 + 1
    h.observer.error(first)
    assert h.value("ollama_tap_requests_in_flight", GEN) == 1
    second.ended = T0 + 2
    h.observer.response(second)
    assert h.value("ollama_tap_requests_in_flight", GEN) == 0


def test_proxy_made_status_is_the_label(h: Harness) -> None:
    h.run(make_exchange(status=502, outcome=Outcome.UPSTREAM_UNREACHABLE, done_reason=None))
    assert h.value("ollama_tap_requests_total", {**GEN, "status": "502"}) == 1
    errors = {**GEN, "kind": "upstream_unreachable"}
    assert h.value("ollama_tap_request_errors_total", errors) == 1


def test_non_inference_routes_count_requests_only(h: Harness) -> None:
    h.run(make_exchange("/api/tags", None, streamed=False, done_reason=None))
    tags = {"endpoint": "/api/tags", "model": ""}
    assert h.value("ollama_tap_requests_total", {**tags, "status": "200"}) == 1
    assert h.count("request_duration_seconds", {**tags, "stream": "false"}) is None


def test_unexpected_done_reason_is_bounded(h: Harness) -> None:
    h.run(make_exchange(usage=native_usage(), done_reason="a prompt-sized reason"))
    assert h.value("ollama_tap_responses_total", {**GEN, "done_reason": "other"}) == 1


def test_chunk_without_request_is_ignored(h: Harness) -> None:
    h.observer.chunks(make_exchange(), [OutputChunk(T0, OutputKind.CONTENT, "x", 1)])
    assert h.count("inter_token_latency_seconds", GEN) is None


def test_registry_carries_build_info_and_standard_collectors(h: Harness) -> None:
    names = {metric.name for metric in h.registry.collect()}
    assert {"ollama_tap_build_info", "python_gc_objects_collected", "python_info"} <= names


@pytest.fixture
async def scraped(aiohttp_client: Any) -> tuple[Harness, TestClient[web.Request, web.Application]]:
    h = Harness()
    h.run(make_exchange(usage=native_usage(), options={"num_ctx": 4096}), chunks=[T0 + 1, T0 + 2])
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(h.registry))
    return h, await aiohttp_client(app)


async def test_exposition_text_format_parses(
    scraped: tuple[Harness, TestClient[web.Request, web.Application]],
) -> None:
    _, client = scraped
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in parse_text(await resp.text())}
    assert families["ollama_tap_request_duration_seconds"].type == "histogram"
    assert families["ollama_tap_requests"].type == "counter"


async def test_exposition_openmetrics_parses(
    scraped: tuple[Harness, TestClient[web.Request, web.Application]],
) -> None:
    _, client = scraped
    accept = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    resp = await client.get("/metrics", headers={"Accept": accept})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    body = await resp.text()
    assert body.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(body)}
    assert families["ollama_tap_decode_tokens_per_second"].type == "histogram"
    assert families["ollama_tap_requests"].type == "counter"

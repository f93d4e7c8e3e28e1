"""Metric families, the metrics observer, and the /metrics handler."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeVar

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from proxy.exchange import Exchange, Outcome, OutputChunk, Usage
from proxy.histogram import LoopHistogram, Series
from proxy.names import ModelLabels
from proxy.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS, NATIVE_GENERATION

NS: Final = "ollama_tap"
NAME: Final = "metrics"

MEASURED_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes with latency histograms and token counts: generation and embeddings."""

LATENCY_BUCKETS: Final = (
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75),
    *(1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1200, 1800),
)
"""Time to first token/content, queue wait and prefill: 5 ms to 30 min."""
DURATION_BUCKETS: Final = (*LATENCY_BUCKETS, 2700, 3600, 5400, 7200)
"""Request duration, load and decode: 5 ms to 2 h."""
INTER_TOKEN_BUCKETS: Final = (
    *(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03),
    *(0.04, 0.05, 0.065, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10),
)
RATE_BUCKETS: Final = (
    *(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 30, 35, 40, 46, 53, 61),
    *(70, 80, 92, 106, 122, 140, 160, 185, 212, 245, 280, 320, 370, 425, 490, 560, 750),
    *(1000, 1500, 2000, 3000, 5000),
)
"""Tokens (or events) per second as DESIGN lists them: steps of about 15 % from 20 to 560,
where a 30 % drop must move the median; whole numbers below, coarse steps up to 5,000."""
CONTEXT_TOKEN_BUCKETS: Final = (
    *(m * 10**e for e in range(6) for m in (1, 2, 5)),
    1_000_000,
    1_048_576,
)
UTILIZATION_BUCKETS: Final = (0.25, 0.5, 0.75, 0.9, 0.95, 1, 1.5, 2, 5, 10)

LOAD_REASONS: Final = frozenset({"load", "unload"})
"""done_reason values of load/unload requests: counted as responses, never as generations."""
DONE_REASONS: Final = LOAD_REASONS | {
    *("stop", "length", "tool_calls", "content_filter", "function_call"),
    *("end_turn", "max_tokens", "tool_use", "stop_sequence", "pause_turn", "refusal"),
    *("completed", "incomplete", "failed", "max_output_tokens"),
}
"""done_reason (or finish/stop reason) values kept as labels; others are `other`."""
COLD_START_NS: Final = 1_000_000_000
"""A load_duration above this is a cold start (and /api/ps is read again for num_ctx)."""
CTX_CLASSES: Final = ((4096, "le4k"), (16384, "le16k"), (65536, "le64k"))

E, M, S = "endpoint", "model", "stream"

_C = TypeVar("_C")


class ModelState(Protocol):
    """What the observer asks of the poller."""

    def context_length(self, model: str | None) -> int | None:
        """The loaded model's runtime context (num_ctx) per /api/ps, if loaded."""

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        """Schedule an /api/ps read soon (a model was just loaded); call `then` after it."""


def _counter(r: CollectorRegistry, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
    return Counter(f"{NS}_{name}", doc, labels, registry=r)


def _gauge(r: CollectorRegistry, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
    return Gauge(f"{NS}_{name}", doc, labels, registry=r)


def _histogram(
    r: CollectorRegistry, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
) -> LoopHistogram:
    # Counted by hand (proxy/histogram.py): every exchange observes some ten of these. Indexed
    # like `Children` (family[endpoint, model]), with its series kept by the family itself.
    return LoopHistogram(r, f"{NS}_{name}", doc, labels, buckets)


class Children(dict[tuple[str, ...], _C]):
    """A labelled family's children by label values: made by `.labels()` on the first lookup
    of a label set, one dict lookup after that.

    `.labels()` checks and stringifies the values, takes the family's lock and looks the child
    up, about 0.6 µs, and an exchange needs some twenty children. Keeping them is safe because
    no request family ever loses a child (only the poller's gauges are `.remove()`d), and the
    dict is bounded as the labels are: endpoints are fixed templates, ModelLabels caps the
    models, the other labels are closed sets.
    """

    __slots__ = ("make",)

    def __init__(self, make: Callable[..., _C]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, values: tuple[str, ...]) -> _C:
        child = self[values] = self.make(*values)
        return child


def _counters(
    r: CollectorRegistry, name: str, doc: str, labels: Sequence[str]
) -> Children[Counter]:
    return Children(_counter(r, name, doc, labels).labels)


def _gauges(r: CollectorRegistry, name: str, doc: str, labels: Sequence[str]) -> Children[Gauge]:
    return Children(_gauge(r, name, doc, labels).labels)


class RequestMetrics:
    """The per-request families (as `Children`), the build info and the standard collectors
    on one registry."""

    def __init__(self, r: CollectorRegistry) -> None:
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        _gauge(r, "build_info", "Build of ollama-tap (=1).", ["version", "python_version"]).labels(
            _version(), platform.python_version()
        ).set(1)
        self.requests = _counters(
            r, "requests_total", "Exchanges, by the status the client got.", [E, M, "status"]
        )
        self.errors = _counters(
            r, "request_errors_total", "Exchanges by outcome other than ok.", [E, M, "kind"]
        )
        self.in_flight = _gauges(r, "requests_in_flight", "Exchanges from request to end.", [E, M])
        self.responses = _counters(
            r, "responses_total", "Replies carrying a done_reason.", [E, M, "done_reason"]
        )
        self.duration = _histogram(
            r, "request_duration_seconds", "Request head to last byte.", [E, M, S], DURATION_BUCKETS
        )
        self.ttft = _histogram(
            r,
            "time_to_first_token_seconds",
            "Request head to first output.",
            [E, M],
            LATENCY_BUCKETS,
        )
        self.ttfc = _histogram(
            r,
            "time_to_first_content_seconds",
            "Request head to first non-thinking output.",
            [E, M],
            LATENCY_BUCKETS,
        )
        self.inter_token = _histogram(
            r,
            "inter_token_latency_seconds",
            "Gaps between output chunks as relayed.",
            [E, M],
            INTER_TOKEN_BUCKETS,
        )
        self.output_rate = _histogram(
            r,
            "observed_output_rate",
            "Output events per second as relayed (streams).",
            [E, M],
            RATE_BUCKETS,
        )
        self.load = _histogram(
            r, "load_duration_seconds", "Ollama's load_duration.", [E, M, S], DURATION_BUCKETS
        )
        self.queue = _histogram(
            r,
            "queue_wait_seconds",
            "total - load - prompt_eval - eval, clamped at 0.",
            [E, M, S],
            LATENCY_BUCKETS,
        )
        self.prompt_eval = _histogram(
            r,
            "prompt_eval_duration_seconds",
            "Ollama's prompt_eval_duration (prefill).",
            [E, M, S],
            LATENCY_BUCKETS,
        )
        self.eval = _histogram(
            r,
            "eval_duration_seconds",
            "Ollama's eval_duration (decode).",
            [E, M, S],
            DURATION_BUCKETS,
        )
        self.decode_rate = _histogram(
            r, "decode_tokens_per_second", "eval_count / eval_duration.", [E, M], RATE_BUCKETS
        )
        self.prefill_rate = _histogram(
            r,
            "prefill_tokens_per_second",
            "Uncached prompt tokens / prompt_eval_duration.",
            [E, M],
            RATE_BUCKETS,
        )
        self.decode_tokens = _counters(
            r, "decode_tokens_total", "eval_count (rate pair).", [M, "ctx"]
        )
        self.decode_seconds = _counters(
            r, "decode_seconds_total", "eval_duration (rate pair).", [M, "ctx"]
        )
        self.prefill_tokens = _counters(
            r, "prefill_tokens_total", "Uncached prompt tokens (rate pair).", [M]
        )
        self.prefill_seconds = _counters(
            r, "prefill_seconds_total", "prompt_eval_duration (rate pair).", [M]
        )
        self.prompt_tokens = _counters(
            r, "prompt_tokens_total", "Prompt tokens, every source.", [E, M]
        )
        self.cached_tokens = _counters(
            r, "prompt_cached_tokens_total", "Prompt tokens served from the cache.", [E, M]
        )
        self.generation_tokens = _counters(
            r, "generation_tokens_total", "Generated tokens, every source.", [E, M]
        )
        self.context_tokens = _histogram(
            r, "context_tokens", "prompt_eval_count + eval_count.", [E, M], CONTEXT_TOKEN_BUCKETS
        )
        self.utilization = _histogram(
            r,
            "context_utilization_ratio",
            "Context tokens / runtime num_ctx.",
            [E, M],
            UTILIZATION_BUCKETS,
        )
        self.cold_starts = _counters(r, "cold_starts_total", "Replies whose load took > 1 s.", [M])


class UpstreamMetrics:
    """The poller's families."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.up = _gauge(r, "upstream_up", "1 when Ollama answered the last poll.")
        self.info = _gauge(r, "upstream_info", "Ollama's version (=1).", ["version"])
        self.poll_errors = _counter(
            r,
            "upstream_poll_errors_total",
            "Failed reads of /api/version, /api/tags, /api/ps, /api/show.",
        )
        self.loaded = _gauge(r, "model_loaded", "1 while /api/ps lists the model.", [M])
        self.vram = _gauge(r, "model_vram_bytes", "size_vram per /api/ps.", [M])
        self.size = _gauge(r, "model_size_bytes", "size per /api/ps.", [M])
        self.context_length = _gauge(
            r, "model_context_length", "Runtime context (num_ctx) per /api/ps.", [M]
        )
        self.loads = _counter(r, "model_loads_total", "Models appearing in /api/ps.", [M])
        self.unloads = _counter(r, "model_unloads_total", "Models leaving /api/ps.", [M])
        self.model_info = _gauge(
            r,
            "model_info",
            "Model details per /api/show (=1).",
            [M, "family", "parameter_size", "quantization"],
        )


def _version() -> str:
    try:
        return importlib.metadata.version("ollama-tap")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def status_label(ex: Exchange) -> str:
    """The HTTP status the client got (the proxy's own 502/504 included); "" when no status
    line reached it (it left, or the proxy stopped, before Ollama answered)."""
    return "" if ex.status is None else str(ex.status)


def ctx_class(context_tokens: int) -> str:
    for limit, name in CTX_CLASSES:
        if context_tokens <= limit:
            return name
    return "gt64k"


def _num_ctx(ex: Exchange) -> int | None:
    """The request's `options.num_ctx`, as Ollama reads it (a float is truncated)."""
    value = (ex.request.options or {}).get("num_ctx")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 1:
        return None
    return int(min(value, 2**63 - 1))


class _State:
    """Per-exchange state between hooks, in `ex.metadata["metrics"]`."""

    __slots__ = ("gaps", "in_flight", "last_at", "model")

    def __init__(self, model: str, in_flight: Gauge) -> None:
        self.model = model
        self.in_flight = in_flight
        self.last_at: float | None = None
        self.gaps: Series | None = None


class MetricsObserver:
    """Turns each exchange into the metrics of DESIGN.md ("Measurements", "Metrics").

    The model label is resolved at `request` (in-flight gauge, inter-token gaps) and again at
    the end, so a name an /api/tags refresh found in the meantime gets its own label.
    """

    name = NAME

    def __init__(
        self, registry: CollectorRegistry, labels: ModelLabels, models: ModelState | None = None
    ) -> None:
        self.m = RequestMetrics(registry)
        self.labels = labels
        self.models = models

    def request(self, ex: Exchange) -> None:
        model = self.labels.label(ex.model)
        gauge = self.m.in_flight[ex.endpoint, model]
        gauge.inc()
        ex.metadata[NAME] = _State(model, gauge)

    def chunks(self, ex: Exchange, pieces: Sequence[OutputChunk]) -> None:
        # Runs once per socket read of every stream. A read's pieces were written at one
        # moment (the hook's contract): one gap from the previous read, then zeros.
        state: _State | None = ex.metadata.get(NAME)
        if state is None:
            return
        at, last, gaps_here = pieces[0].at, state.last_at, len(pieces) - 1
        state.last_at = at
        if last is not None:
            gaps_here += 1
        if not gaps_here:
            return
        gaps = state.gaps
        if gaps is None:
            # Made at the first gap, not at `request`: a one-chunk reply adds no series.
            gaps = state.gaps = self.m.inter_token[ex.endpoint, state.model]
        if last is not None:
            gaps.observe(at - last)
            gaps_here -= 1
        if gaps_here:
            gaps.observe_times(0.0, gaps_here)

    def response(self, ex: Exchange) -> None:
        self._end(ex)

    def error(self, ex: Exchange) -> None:
        self._end(ex)

    def _end(self, ex: Exchange) -> None:
        state: _State | None = ex.metadata.pop(NAME, None)
        if state is not None:
            state.in_flight.dec()
        endpoint, model = ex.endpoint, self.labels.label(ex.model)
        self.m.requests[endpoint, model, status_label(ex)].inc()
        if ex.outcome is not None and ex.outcome is not Outcome.OK:
            self.m.errors[endpoint, model, ex.outcome.value].inc()
        if ex.done_reason is not None:
            reason = ex.done_reason if ex.done_reason in DONE_REASONS else "other"
            self.m.responses[endpoint, model, reason].inc()
        if endpoint not in MEASURED_ENDPOINTS or ex.done_reason in LOAD_REASONS:
            return
        self._latency(ex, endpoint, model)
        if (usage := ex.usage) is None:
            return
        self._tokens(usage, endpoint, model)
        if not usage.has_timings:
            return
        self._phases(ex, usage, endpoint, model)
        waiting = None
        if endpoint in NATIVE_GENERATION:
            self._rates(usage, endpoint, model)
            waiting = self._context(ex, usage, endpoint, model)
        if usage.load_duration > COLD_START_NS:
            self.m.cold_starts[(model,)].inc()
            if self.models is not None:
                # Loaded for this reply, perhaps with another num_ctx: /api/ps is read again,
                # and a utilization that needs it waits for that read.
                self.models.poke_ps(waiting)
            elif waiting is not None:
                waiting()

    def _latency(self, ex: Exchange, endpoint: str, model: str) -> None:
        if (duration := ex.duration) is not None:
            self.m.duration[endpoint, model, _stream(ex)].observe(duration)
        if not ex.streamed:
            return
        if (ttft := ex.ttft) is not None:
            self.m.ttft[endpoint, model].observe(ttft)
        if (ttfc := ex.ttfc) is not None:
            self.m.ttfc[endpoint, model].observe(ttfc)
        if (rate := ex.output_rate) is not None:
            self.m.output_rate[endpoint, model].observe(rate)

    def _tokens(self, usage: Usage, endpoint: str, model: str) -> None:
        self.m.prompt_tokens[endpoint, model].inc(usage.prompt_eval_count)
        self.m.generation_tokens[endpoint, model].inc(usage.eval_count)
        if usage.prompt_eval_cached_count is not None:
            self.m.cached_tokens[endpoint, model].inc(usage.prompt_eval_cached_count)

    def _phases(self, ex: Exchange, usage: Usage, endpoint: str, model: str) -> None:
        labels = (endpoint, model, _stream(ex))
        self.m.load[labels].observe(usage.load_duration / 1e9)
        if endpoint not in NATIVE_GENERATION:
            return
        self.m.queue[labels].observe(usage.queue_wait_ns / 1e9)
        self.m.prompt_eval[labels].observe(usage.prompt_eval_duration / 1e9)
        self.m.eval[labels].observe(usage.eval_duration / 1e9)

    def _rates(self, usage: Usage, endpoint: str, model: str) -> None:
        if usage.eval_count > 0 and usage.eval_duration > 0:
            labels = (model, ctx_class(usage.context_size))
            self.m.decode_tokens[labels].inc(usage.eval_count)
            self.m.decode_seconds[labels].inc(usage.eval_duration / 1e9)
        if (decode := usage.decode_rate) is not None:
            self.m.decode_rate[endpoint, model].observe(decode)
        if (prefill := usage.prefill_rate) is not None and usage.prefill_tokens is not None:
            self.m.prefill_rate[endpoint, model].observe(prefill)
            self.m.prefill_tokens[(model,)].inc(usage.prefill_tokens)
            self.m.prefill_seconds[(model,)].inc(usage.prompt_eval_duration / 1e9)

    def _context(
        self, ex: Exchange, usage: Usage, endpoint: str, model: str
    ) -> Callable[[], None] | None:
        """Observe the context size and utilization; the utilization's observation is
        returned instead when it needs the loaded model's num_ctx and the model was loaded
        for this reply (the caller runs it after /api/ps was read again)."""
        size = usage.context_size
        if size <= 0:
            return None
        self.m.context_tokens[endpoint, model].observe(size)
        if (num_ctx := _num_ctx(ex)) is not None:
            self.m.utilization[endpoint, model].observe(size / num_ctx)
            return None
        models = self.models
        if models is None:
            return None

        name = ex.model  # the name, not the Exchange, is kept until a deferred observation

        def observe() -> None:
            if loaded_ctx := models.context_length(name):
                self.m.utilization[endpoint, model].observe(size / loaded_ctx)

        if usage.load_duration > COLD_START_NS:
            return observe
        observe()
        return None


def _stream(ex: Exchange) -> str:
    return "true" if ex.streamed else "false"


def metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The /metrics handler: prometheus_client's own exposition, text format or OpenMetrics
    as the scraper's Accept header asks."""

    async def handle(request: web.Request) -> web.StreamResponse:
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Collecting runs on the loop and takes a few ms for a large registry: cheaper than
        # a thread hop at scrape rates, and the collectors are not async.
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    return handle

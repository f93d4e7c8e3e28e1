"""MetricsObserver, which feeds the request families from exchanges, and the /metrics handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder

from ollama_tap.cloud import LOCAL, location
from ollama_tap.exchange import Exchange, Outcome, OutputChunk, Usage
from ollama_tap.hooks import Phase
from ollama_tap.measures import cold_start, ctx_class, request_num_ctx
from ollama_tap.metrics.histogram import Series
from ollama_tap.metrics.registered import Counts, RequestMetrics
from ollama_tap.names import ModelLabels
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS, NATIVE_GENERATION
from ollama_tap.ollama.request import honoured_options

NAME: Final = "metrics"

MEASURED_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes with latency histograms and token counts: generation and embeddings."""

LOAD_REASONS: Final = frozenset({"load", "unload"})
"""done_reason values of load/unload requests: counted as responses, never as generations."""
DONE_REASONS: Final = LOAD_REASONS | {
    *("stop", "length", "tool_calls", "content_filter", "function_call"),
    *("end_turn", "max_tokens", "tool_use", "stop_sequence", "pause_turn", "refusal"),
    *("completed", "incomplete", "failed", "max_output_tokens"),
}
"""done_reason (or finish/stop reason) values kept as labels; others are `other`."""


class ModelState(Protocol):
    """What the observer asks of the poller."""

    def context_length(self, model: str | None) -> int | None:
        """The loaded model's runtime context (num_ctx) per /api/ps, if loaded."""

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        """Schedule an /api/ps read soon (a model was just loaded); call `then` after it."""


def status_label(ex: Exchange) -> str:
    """The HTTP status the client got (the proxy's own 502/504 included); "" when no status
    line reached it (it left, or the proxy stopped, before Ollama answered)."""
    return "" if ex.status is None else str(ex.status)


class _State:
    """Per-exchange state between hooks, in `ex.metadata["metrics"]`."""

    __slots__ = ("counts", "gaps", "in_flight", "last_at", "model")

    def __init__(self, model: str, counts: Counts, in_flight: Gauge) -> None:
        self.model = model
        self.counts = counts
        self.in_flight = in_flight
        self.last_at: float | None = None
        self.gaps: Series | None = None


class MetricsObserver:
    """Turns each exchange into the README's metrics ("Measurements", "Metric reference").

    The model label is resolved at `request` (in-flight gauge), again at `response_headers`
    (the in-flight count moves and the inter-token gaps follow: the head's status may just
    have proven the name, see ModelLabels) and at the end, so a name an /api/tags refresh
    found in the meantime gets its own label. The series of a label whose slot is freed go.
    The client label (`ex.client_label`) is on the counters and the in-flight gauge only:
    on the histograms it would multiply every bucket series by the number of clients.

    With several boxes the counters and the in-flight gauge are the exchange's box's
    (`ex.box` looked up in RequestMetrics.by_box once at each of their three hooks), so the
    in-flight count follows a request the router sent on to the next box; the histograms
    and the per-chunk path are the same for every box.
    """

    name = NAME
    phase = Phase.SINK

    def __init__(
        self,
        registry: CollectorRegistry,
        labels: ModelLabels,
        models: ModelState | None = None,
        boxes: Mapping[str, CollectorRegistry] | None = None,
    ) -> None:
        self.m = RequestMetrics(registry, boxes)
        self.labels = labels
        self.models = models
        labels.on_free(self.m.forget_model)

    def request(self, ex: Exchange) -> None:
        model = self.labels.label(ex.model)
        counts = self.m.by_box.get(ex.box, self.m.other)
        gauge = counts.in_flight[ex.endpoint, model, ex.client_label]
        gauge.inc()
        ex.metadata[NAME] = _State(model, counts, gauge)

    def response_headers(self, ex: Exchange) -> None:
        state: _State | None = ex.metadata.get(NAME)
        if state is None:
            return
        model = self.labels.label(ex.model)
        counts = self.m.by_box.get(ex.box, self.m.other)
        if model != state.model or counts is not state.counts:
            state.in_flight.dec()
            state.in_flight = counts.in_flight[ex.endpoint, model, ex.client_label]
            state.in_flight.inc()
            state.model, state.counts = model, counts

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
        endpoint, model, client = ex.endpoint, self.labels.label(ex.model), ex.client_label
        where, c = location(ex), self.m.by_box.get(ex.box, self.m.other)
        c.requests[endpoint, model, client, status_label(ex), where].inc()
        if ex.outcome is not None and ex.outcome is not Outcome.OK:
            c.errors[endpoint, model, client, ex.outcome.value].inc()
        if ex.done_reason is not None:
            reason = ex.done_reason if ex.done_reason in DONE_REASONS else "other"
            c.responses[endpoint, model, reason].inc()
        if ex.retried is not None:
            c.retries[(ex.retried.value,)].inc()
        if endpoint not in MEASURED_ENDPOINTS or ex.done_reason in LOAD_REASONS:
            return
        self._latency(ex, endpoint, model)
        if (usage := ex.usage) is None:
            return
        self._tokens(c, usage, endpoint, model, client, where)
        if not usage.has_timings or where != LOCAL:
            # A cloud reply's timings are ollama.com's (C4): no local figure takes them.
            return
        self._phases(ex, usage, endpoint, model)
        cold, waiting = cold_start(usage), None
        if endpoint in NATIVE_GENERATION:
            self._rates(c, usage, endpoint, model)
            waiting = self._context(ex, usage, endpoint, model, cold)
        if cold:
            c.cold_starts[(model,)].inc()
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
            if endpoint in INFERENCE_ENDPOINTS:
                self.m.client_ttft[(ex.client_label,)].observe(ttft)
        if (ttfc := ex.ttfc) is not None:
            self.m.ttfc[endpoint, model].observe(ttfc)
        if (rate := ex.output_rate) is not None:
            self.m.output_rate[endpoint, model].observe(rate)

    def _tokens(
        self, c: Counts, usage: Usage, endpoint: str, model: str, client: str, where: str
    ) -> None:
        labels = (endpoint, model, client, where)
        if usage.prompt_eval_count is not None:
            c.prompt_tokens[labels].inc(usage.prompt_eval_count)
        c.generation_tokens[labels].inc(usage.eval_count)
        if usage.prompt_eval_cached_count is not None:
            c.cached_tokens[labels].inc(usage.prompt_eval_cached_count)

    def _phases(self, ex: Exchange, usage: Usage, endpoint: str, model: str) -> None:
        labels = (endpoint, model, _stream(ex))
        self.m.load[labels].observe(usage.load_duration / 1e9)
        if endpoint not in NATIVE_GENERATION:
            return
        self.m.queue[labels].observe(usage.queue_wait_ns / 1e9)
        self.m.prompt_eval[labels].observe(usage.prompt_eval_duration / 1e9)
        self.m.eval[labels].observe(usage.eval_duration / 1e9)

    def _rates(self, c: Counts, usage: Usage, endpoint: str, model: str) -> None:
        if usage.eval_count > 0 and usage.eval_duration > 0:
            labels = (model, ctx_class(usage.context_size))
            c.decode_tokens[labels].inc(usage.eval_count)
            c.decode_seconds[labels].inc(usage.eval_duration / 1e9)
        if (decode := usage.decode_rate) is not None:
            self.m.decode_rate[endpoint, model].observe(decode)
        if (prefill := usage.prefill_rate) is not None and usage.prefill_tokens is not None:
            self.m.prefill_rate[endpoint, model].observe(prefill)
            c.prefill_tokens[(model,)].inc(usage.prefill_tokens)
            c.prefill_seconds[(model,)].inc(usage.prompt_eval_duration / 1e9)

    def _context(
        self, ex: Exchange, usage: Usage, endpoint: str, model: str, cold: bool
    ) -> Callable[[], None] | None:
        """Observe the context size and utilization; the utilization's observation is
        returned instead when it needs the loaded model's num_ctx and the model was loaded
        for this reply (the caller runs it after /api/ps was read again)."""
        size = usage.context_size
        if size <= 0:
            return None
        self.m.context_tokens[endpoint, model].observe(size)
        if (num_ctx := request_num_ctx(honoured_options(ex))) is not None:
            self.m.utilization[endpoint, model].observe(size / num_ctx)
            return None
        models = self.models
        if models is None:
            return None

        name = ex.model  # the name, not the Exchange, is kept until a deferred observation

        def observe() -> None:
            if loaded_ctx := models.context_length(name):
                self.m.utilization[endpoint, model].observe(size / loaded_ctx)

        if cold:
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

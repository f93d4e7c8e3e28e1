"""The GenAI client metrics over OTLP (`--otel-metrics`), with the conventions' buckets.

Prometheus stays the proxy's metrics path; these are for a stack that reads OTLP only.
Each exchange records at most a handful of histogram points, at its end, on the loop (the
SDK aggregates in memory); the periodic reader's thread exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from ollama_tap.exchange import Exchange
from ollama_tap.otel import semconv as sc
from ollama_tap.otel.config import GRPC, OtelConfig
from ollama_tap.otel.drops import Drops, Reason, Signal
from ollama_tap.otel.spans import Attributes

DURATION_BUCKETS: Final = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
)
"""gen_ai.client.operation.duration, as the conventions advise (seconds)."""
TOKEN_BUCKETS: Final = (
    *(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216),
    67108864,
)
"""gen_ai.client.token.usage."""
FIRST_CHUNK_BUCKETS: Final = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5),
    10.0,
)
"""gen_ai.client.operation.time_to_first_chunk (seconds)."""
PER_CHUNK_BUCKETS: Final = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
)
"""gen_ai.client.operation.time_per_output_chunk (seconds)."""

_METRIC_KEYS: Final = (
    sc.OPERATION, sc.PROVIDER, sc.SERVER_ADDRESS, sc.SERVER_PORT, sc.ERROR_TYPE,
)  # fmt: skip
"""The span attributes the metrics carry (the conventions' list), each of a bounded set;
`gen_ai.request.model` is added as the Prometheus `model` label names it."""


class CountedExporter(MetricExporter):
    """The OTLP metric exporter, with the data points of every export that failed counted
    in `ollama_tap_otel_dropped_total{signal="metrics"}` (the SDK logs and moves on)."""

    def __init__(self, inner: MetricExporter, drops: Drops) -> None:
        super().__init__(inner._preferred_temporality, inner._preferred_aggregation)
        self.inner = inner
        self.drops = drops

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            result = MetricExportResult.FAILURE
        if result is not MetricExportResult.SUCCESS:
            self.drops.add(Signal.METRICS, Reason.EXPORT_FAILED, points(metrics_data))
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis, **kwargs)


def points(data: MetricsData) -> int:
    """The data points an export carries."""
    return sum(
        len(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    )


def _exporter(config: OtelConfig) -> MetricExporter:
    endpoint = config.signal_url("metrics")
    if config.protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=endpoint)


class GenAiMetrics:
    """The four client histograms; `record` takes an ended exchange and its span's common
    attributes. Every series a proxy makes is one the Prometheus metrics have too: the
    model as `label` names it (`ModelLabels.label`: a name Ollama has not vouched for is
    `other`), so a flood of made-up names cannot grow the SDK's aggregation, nor the
    export past a collector's limit."""

    def __init__(
        self, config: OtelConfig, resource: Resource, drops: Drops, label: Callable[[object], str]
    ) -> None:
        self.label = label
        reader = PeriodicExportingMetricReader(CountedExporter(_exporter(config), drops))
        views = [
            View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(buckets))
            for name, buckets in (
                (sc.OPERATION_DURATION, DURATION_BUCKETS),
                (sc.TOKEN_USAGE, TOKEN_BUCKETS),
                (sc.TIME_TO_FIRST_CHUNK, FIRST_CHUNK_BUCKETS),
                (sc.TIME_PER_OUTPUT_CHUNK, PER_CHUNK_BUCKETS),
            )
        ]
        self.provider = MeterProvider(
            metric_readers=[reader], resource=resource, views=views, shutdown_on_exit=False
        )
        meter = self.provider.get_meter("ollama-tap")
        self.duration: Histogram = meter.create_histogram(sc.OPERATION_DURATION, unit="s")
        self.tokens: Histogram = meter.create_histogram(sc.TOKEN_USAGE, unit="{token}")
        self.first_chunk: Histogram = meter.create_histogram(sc.TIME_TO_FIRST_CHUNK, unit="s")
        self.per_chunk: Histogram = meter.create_histogram(sc.TIME_PER_OUTPUT_CHUNK, unit="s")

    def record(self, ex: Exchange, common: Attributes) -> None:
        attrs: Attributes = {key: common[key] for key in _METRIC_KEYS if key in common}
        if model := self.label(ex.model):
            attrs[sc.REQUEST_MODEL] = model
        if (duration := ex.duration) is not None:
            self.duration.record(duration, attrs)
        if (usage := ex.usage) is not None:
            if usage.prompt_eval_count is not None:
                self.tokens.record(usage.prompt_eval_count, {**attrs, sc.TOKEN_TYPE: "input"})
            self.tokens.record(usage.eval_count, {**attrs, sc.TOKEN_TYPE: "output"})
        if not ex.streamed:
            return
        if (ttft := ex.ttft) is not None:
            self.first_chunk.record(ttft, attrs)
        if (rate := ex.output_rate) is not None:
            # The mean gap between output chunks after the first, as relayed.
            self.per_chunk.record(1 / rate, attrs)

    def close(self) -> None:
        """Blocking: export the last points and stop the reader's thread."""
        self.provider.shutdown()

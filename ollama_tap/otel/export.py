"""The SDK's side: the tracer provider, the OTLP exporter behind the SDK's BatchSpanProcessor,
and the count of spans that never reached the collector.

The batch processor's thread does every export; the event loop only appends a finished span
to its queue. A collector that is down, refuses or hangs costs the proxy nothing but spans:
those the full queue pushed out and those whose export failed, all counted in
`ollama_tap_otel_spans_dropped_total`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import Counter

from ollama_tap.config import ConfigError
from ollama_tap.otel.config import GRPC, OtelConfig
from ollama_tap.otel.emit import Emitter
from ollama_tap.otel.encode import WireExporter

SERVICE: Final = "ollama-tap"
DEFAULT_QUEUE: Final = 2048
"""The SDK's own default of OTEL_BSP_MAX_QUEUE_SIZE."""
DEFAULT_VALUE_LENGTH: Final = 64 * 1024
"""Characters of a string attribute kept when no OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT says:
the SDK keeps them whole, and a pasted document as a prompt (or as a model name) would then
travel whole to the collector, whose request limit drops its whole batch."""


def _package_version() -> str:
    try:
        return version("ollama-tap")
    except PackageNotFoundError:
        return "0"


def resource() -> Resource:
    """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME as the SDK reads them; the service is
    `ollama-tap` when neither names one."""
    found = Resource.create({"service.version": _package_version()})
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: SERVICE}))
    return found


def span_exporter(config: OtelConfig) -> SpanExporter:
    """The OTLP exporter of the configured protocol; an endpoint left unset is the SDK's
    (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, headers, timeout, compression all read there)."""
    endpoint = config.signal_url("traces")
    if config.protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return WireExporter(OTLPSpanExporter(endpoint=endpoint))


def value_length() -> int:
    """OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, else OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, as the
    SDK's SpanLimits reads them; DEFAULT_VALUE_LENGTH when neither is set."""
    try:
        found = SpanLimits().max_span_attribute_length
    except ValueError as exc:
        raise ConfigError(f"{exc}: set it to a number of characters, or unset it.") from None
    return DEFAULT_VALUE_LENGTH if found is None else found


class QueueCount:
    """How many finished spans wait in the batch processor's queue, by its public edges: one
    in at each span's end, a batch out at each export. When the queue is full the SDK pushes
    the oldest span out to take the new one: that is a drop."""

    def __init__(self, capacity: int, dropped: Counter) -> None:
        self.capacity = capacity
        self.dropped = dropped
        self.depth = 0
        self._lock = threading.Lock()

    def entered(self) -> None:
        with self._lock:
            if self.depth >= self.capacity:
                full = True
            else:
                full = False
                self.depth += 1
        if full:
            self.dropped.inc()

    def left(self, count: int) -> None:
        with self._lock:
            self.depth = max(0, self.depth - count)


class _Counting(SpanProcessor):
    """Placed before the batch processor: sees every span the processor is handed."""

    def __init__(self, queue: QueueCount) -> None:
        self.queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self.queue.entered()


class CountingExporter(SpanExporter):
    """The real exporter, with each batch taken off the queue count and a failed batch
    counted as dropped (the SDK logs the failure and moves on)."""

    def __init__(self, inner: SpanExporter, queue: QueueCount) -> None:
        self.inner = inner
        self.queue = queue

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.queue.left(len(spans))
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.queue.dropped.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class OncePerMinute(logging.Filter):
    """Lets the same message of the SDK through once a minute: with a collector down, the
    batch processor warns for each span it drops (on the loop, as the span ends) and the
    exporter for each batch; the drop counter has the numbers."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[object, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now, key = time.monotonic(), record.msg
        if now - self._last.get(key, -60.0) < 60.0:
            return False
        self._last[key] = now
        return True


QUIET_LOGGERS: Final = (
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)


def queue_capacity() -> int:
    try:
        return max(1, int(os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE)))
    except ValueError:
        return DEFAULT_QUEUE


class Tracing:
    """The tracer provider (the sampler and resource the variables configure) and its one
    batch processor, fed by `emitter`; `close` flushes what it can."""

    def __init__(self, config: OtelConfig, dropped: Counter) -> None:
        for name in QUIET_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, OncePerMinute) for f in logger.filters):
                logger.addFilter(OncePerMinute())
        capacity = queue_capacity()
        self.queue = QueueCount(capacity, dropped)
        exporter = CountingExporter(span_exporter(config), self.queue)
        # Not at interpreter exit: `serve` shuts it down in its own phase, bounded.
        self.provider = TracerProvider(resource=resource(), shutdown_on_exit=False)
        processors = (_Counting(self.queue), BatchSpanProcessor(exporter, max_queue_size=capacity))
        for processor in processors:
            self.provider.add_span_processor(processor)  # for its flush and shutdown
        scope = InstrumentationScope("ollama-tap", _package_version())
        self.emitter = Emitter(
            self.provider.resource, scope, self.provider.sampler, processors, value_length()
        )

    def close(self) -> None:
        """Blocking: export what is queued (the exporter's own timeout bounds each batch),
        then stop the processor's thread. Run it off the loop."""
        self.provider.shutdown()

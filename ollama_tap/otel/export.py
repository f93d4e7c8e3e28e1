"""The SDK's side: the tracer provider, the OTLP exporter behind the SDK's BatchSpanProcessor,
the bounds on what waits for it, and the count of spans that never reached the collector.

The batch processor's thread does every export; the event loop only appends a finished span
to its queue. A collector that is down, refuses or hangs costs the proxy nothing but spans,
and a bounded amount of memory (QUEUE_BYTES): the spans the full queue did not take, those
whose export failed and those a collector refused as too large, all counted in
`ollama_tap_otel_dropped_total{signal="spans"}` (ollama_tap/otel/drops.py).
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

from ollama_tap.config import ConfigError
from ollama_tap.otel.config import GRPC, OtelConfig
from ollama_tap.otel.drops import Drops, Reason, Signal
from ollama_tap.otel.emit import SPAN_OVERHEAD, Emitter, text_size
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


QUEUE_BYTES: Final = 32 * 1024 * 1024
"""Estimated bytes of finished spans held for export at most: those waiting in the batch
processor's queue and the batch being sent. A collector that hangs then costs the proxy this
much memory, not OTEL_BSP_MAX_QUEUE_SIZE times the largest span (docs/opentelemetry.md)."""
BATCH_BYTES: Final = 3 * 1024 * 1024
"""Estimated bytes of spans in one export request at most: under the 4 MiB a gRPC collector
takes by default, and the 20 MiB of its OTLP/HTTP receiver."""


def span_size(span: ReadableSpan) -> int:
    """The span's bytes as the emitter estimated them (`emit.SizedSpan`), else estimated
    now: a span made by some other path is still bounded."""
    size = getattr(span, "size", None)
    if isinstance(size, int):
        return size
    return SPAN_OVERHEAD + text_size([span.name]) + text_size((span.attributes or {}).values())


class Queue:
    """The spans between the loop and the collector, by their count and estimated bytes:
    each admitted as it ends (`admit`), each let go when the export of its batch returned
    (`left`). Past OTEL_BSP_MAX_QUEUE_SIZE spans or QUEUE_BYTES, the batch being sent
    included, the new span is dropped here: the SDK's own queue, as long, never fills (it
    would push out the oldest, uncounted)."""

    def __init__(self, capacity: int, drops: Drops, max_bytes: int) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.drops = drops
        self.depth = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def admit(self, size: int) -> bool:
        with self._lock:
            kept = self.depth < self.capacity and self.bytes + size <= self.max_bytes
            if kept:
                self.depth += 1
                self.bytes += size
        if not kept:
            self.drops.add(Signal.SPANS, Reason.QUEUE_FULL)
        return kept

    def left(self, count: int, size: int) -> None:
        with self._lock:
            self.depth = max(0, self.depth - count)
            self.bytes = max(0, self.bytes - size)


class Gate(SpanProcessor):
    """What the emitter ends spans into: the batch processor, behind the queue's bounds."""

    def __init__(self, inner: SpanProcessor, queue: Queue) -> None:
        self.inner = inner
        self.queue = queue

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self.queue.admit(span_size(span)):
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def batches(spans: Sequence[ReadableSpan], limit: int) -> list[list[ReadableSpan]]:
    """`spans` in order, cut into runs of at most `limit` estimated bytes (a larger span
    alone)."""
    out: list[list[ReadableSpan]] = []
    size = limit
    for span in spans:
        one = span_size(span)
        if size + one > limit:
            out.append([])
            size = 0
        out[-1].append(span)
        size += one
    return out


class CountingExporter(SpanExporter):
    """The real exporter behind the batch processor: each batch sent in requests of at most
    BATCH_BYTES, a request the collector refuses as too large (413) split in halves down to
    the span it cannot take, and every span lost counted (`Drops`); the batch leaves the
    queue's count when its export returns."""

    def __init__(self, inner: SpanExporter, queue: Queue, batch_bytes: int) -> None:
        self.inner = inner
        self.queue = queue
        self.batch_bytes = batch_bytes

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            sent = [self._send(batch) for batch in batches(spans, self.batch_bytes)]
        finally:
            self.queue.left(len(spans), sum(span_size(span) for span in spans))
        return SpanExportResult.SUCCESS if all(sent) else SpanExportResult.FAILURE

    def _send(self, spans: list[ReadableSpan]) -> bool:
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            return True
        too_large = isinstance(self.inner, WireExporter) and self.inner.refused_as_too_large
        if too_large and len(spans) > 1:
            half = len(spans) // 2
            return all([self._send(spans[:half]), self._send(spans[half:])])
        reason = Reason.TOO_LARGE if too_large else Reason.EXPORT_FAILED
        self.queue.drops.add(Signal.SPANS, reason, len(spans))
        return False

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
    batch processor behind the queue's bounds, fed by `emitter`; `close` flushes what it
    can."""

    def __init__(self, config: OtelConfig, drops: Drops) -> None:
        for name in QUIET_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, OncePerMinute) for f in logger.filters):
                logger.addFilter(OncePerMinute())
        capacity = queue_capacity()
        self.queue = Queue(capacity, drops, QUEUE_BYTES)
        exporter = CountingExporter(span_exporter(config), self.queue, BATCH_BYTES)
        # Not at interpreter exit: `serve` shuts it down in its own phase, bounded.
        self.provider = TracerProvider(resource=resource(), shutdown_on_exit=False)
        batch = BatchSpanProcessor(exporter, max_queue_size=capacity)
        self.provider.add_span_processor(batch)  # for its flush and shutdown
        scope = InstrumentationScope("ollama-tap", _package_version())
        self.emitter = Emitter(
            self.provider.resource,
            scope,
            self.provider.sampler,
            [Gate(batch, self.queue)],
            value_length(),
        )

    def close(self) -> None:
        """Blocking: export what is queued (the exporter's own timeout bounds each batch),
        then stop the processor's thread. Run it off the loop."""
        self.provider.shutdown()

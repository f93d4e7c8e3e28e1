"""What the OpenTelemetry export lost, by signal and reason: counted, and logged at a bounded
rate (no SDK import: the counter exists whether or not the export is on)."""

from __future__ import annotations

import enum

import structlog
from prometheus_client import Counter

from ollama_tap.throttled import ThrottledLog

log = structlog.get_logger("ollama_tap.otel")


class Signal(enum.StrEnum):
    SPANS = "spans"
    METRICS = "metrics"
    """Counted in data points: an export that failed loses every point it carried."""


class Reason(enum.StrEnum):
    QUEUE_FULL = "queue_full"
    """The export queue was at its bound (spans, or bytes of them): the newest was not kept."""
    EXPORT_FAILED = "export_failed"
    """The collector refused the request, failed, or did not answer within the timeout."""
    TOO_LARGE = "too_large"
    """A single span the collector refused as too large (HTTP 413) after its batch was split."""


class Drops:
    """`ollama_tap_otel_dropped_total{signal, reason}`, and a warning `otel_dropped` at the
    first loss of a kind and then at most once a minute, with the count since the last line
    (`ThrottledLog`). Called from the event loop and from the SDK's export threads."""

    def __init__(self, counter: Counter) -> None:
        self.children = {
            (signal, reason): counter.labels(signal.value, reason.value)
            for signal in Signal
            for reason in Reason
        }
        self.said = ThrottledLog(log.warning, "otel_dropped")

    def add(self, signal: Signal, reason: Reason, count: int = 1) -> None:
        if count > 0:
            self.children[(signal, reason)].inc(count)
            self.said.add(count, signal=signal.value, reason=reason.value)

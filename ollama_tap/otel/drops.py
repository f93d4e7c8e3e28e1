"""What the OpenTelemetry export lost, by signal and reason: counted, and logged at a bounded
rate (no SDK import: the counter exists whether or not the export is on)."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import Final

import structlog
from prometheus_client import Counter

log = structlog.get_logger("ollama_tap.otel")

LOG_EVERY: Final = 60.0
"""Seconds between two log lines of one (signal, reason): a collector that is down would
otherwise log at every batch; the counter has every loss."""


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
    first loss of a kind and then at most once per LOG_EVERY, with the count since the last
    line. Called from the event loop and from the SDK's export threads."""

    def __init__(self, counter: Counter, clock: Callable[[], float] = time.monotonic) -> None:
        self.children = {
            (signal, reason): counter.labels(signal.value, reason.value)
            for signal in Signal
            for reason in Reason
        }
        self._clock = clock
        self._lock = threading.Lock()
        self._unlogged: dict[tuple[Signal, Reason], int] = {}
        self._logged: dict[tuple[Signal, Reason], float] = {}

    def add(self, signal: Signal, reason: Reason, count: int = 1) -> None:
        if count <= 0:
            return
        kind = (signal, reason)
        self.children[kind].inc(count)
        now = self._clock()
        with self._lock:
            unlogged = self._unlogged.get(kind, 0) + count
            due = now - self._logged.get(kind, now - LOG_EVERY) >= LOG_EVERY
            if due:
                self._logged[kind] = now
                self._unlogged[kind] = 0
            else:
                self._unlogged[kind] = unlogged
        if due:
            log.warning("otel_dropped", signal=signal.value, reason=reason.value, count=unlogged)

"""The recorder's own metrics (the `self` rows of DESIGN's metric table)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RecorderMetrics:
    """Registered on the injected registry whatever the mode, so dashboards see zeros."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "ollama_tap_records_dropped_total",
            "Records dropped because the recorder's queue was full (traffic was not slowed).",
            registry=registry,
        )
        self.write_errors = Counter(
            "ollama_tap_recorder_write_errors_total",
            "Records the writer failed to store.",
            registry=registry,
        )
        self.queue_depth = Gauge(
            "ollama_tap_recorder_queue_depth",
            "Records waiting for the writer thread.",
            registry=registry,
        )
        self.db_size = Gauge(
            "ollama_tap_db_size_bytes",
            "Size of the recordings database on disk (main file and write-ahead log).",
            registry=registry,
        )

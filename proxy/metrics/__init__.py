"""The ollama_tap_* metrics: the families, the observer that feeds them, and /metrics."""

from __future__ import annotations

from proxy.metrics.observer import MetricsObserver, metrics_handler
from proxy.metrics.registered import Children, RecorderMetrics, UpstreamMetrics

__all__ = ["Children", "MetricsObserver", "RecorderMetrics", "UpstreamMetrics", "metrics_handler"]

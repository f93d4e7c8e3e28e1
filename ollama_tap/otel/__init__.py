"""OpenTelemetry: every inference and embedding exchange as a GenAI span over OTLP.

Off unless an endpoint is set (`--otlp-endpoint` or the standard OTEL_* variables); the SDK
is imported only then, so a proxy that exports nothing loads none of it. The pieces: config
(settings and variables), semconv (the names), spans and content (an exchange as attributes),
export (the SDK, the batch processor and its bounds), drops (what was lost), metrics (the
GenAI client metrics), observer (the hooks). docs/opentelemetry.md has the mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ollama_tap.config import Settings
from ollama_tap.metrics.families import OTEL_DROPPED
from ollama_tap.metrics.registered import counter
from ollama_tap.names import ModelLabels
from ollama_tap.otel.config import otel_config
from ollama_tap.otel.drops import Drops
from ollama_tap.otel.spans import ContextLength

CLOSE_GRACE = 5.0
"""Seconds shutdown waits for the last spans to leave; a collector that is down costs no
more than this."""


class Otel:
    """The export while the proxy runs: its observers, and what stops it."""

    def __init__(self, observers: list[object], closers: list[Callable[[], None]]) -> None:
        self.observers = observers
        self._closers = closers

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        """Flush and stop the SDK in a daemon thread, waiting for it at most `grace` seconds
        (the SDK's shutdown blocks, and a hanging collector would otherwise hold `serve`)."""
        loop, done = asyncio.get_running_loop(), asyncio.Event()

        def run() -> None:
            for close in self._closers:
                with contextlib.suppress(Exception):
                    close()
            with contextlib.suppress(RuntimeError):  # the loop may be gone by now
                loop.call_soon_threadsafe(done.set)

        threading.Thread(target=run, name="otel-shutdown", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), grace)


def start(
    settings: Settings,
    registry: CollectorRegistry,
    labels: ModelLabels,
    context_length: ContextLength | None = None,
) -> Otel | None:
    """The export `settings` and the environment ask for, or None when it is off (the drop
    counter is registered either way, so the metric reference holds for every proxy).
    `labels` name the model on spans as the records do, on metrics as Prometheus does.

    Raises ConfigError for an unusable protocol or endpoint, and for a missing SDK."""
    drops = Drops(counter(registry, OTEL_DROPPED))
    config = otel_config(settings)
    if config is None:
        return None
    try:
        from ollama_tap.otel.export import Tracing, resource
        from ollama_tap.otel.metrics import GenAiMetrics
        from ollama_tap.otel.observer import OtelObserver
    except ImportError as exc:
        from ollama_tap.config import ConfigError
        from ollama_tap.extras import install_command

        raise ConfigError(
            f"OpenTelemetry export needs the otel extra ({exc.name} is missing): "
            f"{install_command('otel')}, or unset --otlp-endpoint and OTEL_EXPORTER_OTLP_*."
        ) from None
    tracing = Tracing(config, drops)
    metrics = GenAiMetrics(config, resource(), drops, labels.label) if config.metrics else None
    observer = OtelObserver(config, tracing, metrics, context_length, labels.spelling)
    observers: list[object] = [observer]
    closers = [tracing.close] + ([metrics.close] if metrics is not None else [])
    return Otel(observers, closers)

"""The waiting and busy families, read from the in-flight registry when Prometheus scrapes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ollama_tap.inflight.registry import InFlight
from ollama_tap.metrics.families import CLIENT_BUSY, OLDEST_WAIT, WAITING


class InFlightCollector(Collector):
    """`requests_waiting` and `oldest_wait_seconds` per model, `client_busy_seconds_total`
    per (client, model): computed at scrape time from the exchanges in flight, so relaying
    a chunk costs nothing more. A model that has been busy keeps its series, at 0 while
    nothing of it waits, until its label slot is freed."""

    def __init__(self, inflight: InFlight) -> None:
        self.inflight = inflight

    def describe(self) -> Iterator[Metric]:
        # Registering must not compute a scrape; the families are all it needs.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        waiting_f, oldest_f, busy_f = self._families()
        inflight = self.inflight
        now = inflight.clock()
        waiting = inflight.waiting()
        for model in sorted(inflight.models() | waiting.keys()):
            entries = waiting.get(model, [])
            waiting_f.add_metric([model], len(entries))
            oldest_f.add_metric([model], now - entries[0].ex.started if entries else 0.0)
        for (client, model), seconds in sorted(inflight.busy_seconds().items()):
            busy_f.add_metric([client, model], seconds)
        yield from (waiting_f, oldest_f, busy_f)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(WAITING.name, WAITING.help, labels=WAITING.labels),
            GaugeMetricFamily(OLDEST_WAIT.name, OLDEST_WAIT.help, labels=OLDEST_WAIT.labels),
            CounterMetricFamily(CLIENT_BUSY.name, CLIENT_BUSY.help, labels=CLIENT_BUSY.labels),
        )


def register(registry: CollectorRegistry, inflight: InFlight) -> None:
    registry.register(InFlightCollector(inflight))

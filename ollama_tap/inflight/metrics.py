"""The waiting and busy families, read from the in-flight registry when Prometheus scrapes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ollama_tap.inflight.registry import Entry, InFlight
from ollama_tap.metrics.families import CLIENT_BUSY, OLDEST_WAIT, WAITING


class InFlightCollector(Collector):
    """`requests_waiting` and `oldest_wait_seconds` per model, `client_busy_seconds_total`
    per (client, model): computed at scrape time from the exchanges in flight, so relaying
    a chunk costs nothing more. A model that has been busy keeps its series, at 0 while
    nothing of it waits, until its label slot is freed.

    With several boxes (`boxed`), the waiting pair is per (model, upstream): each box queues
    its own requests, so a queue on one is not spread over all. A pair keeps its series once
    it has waited, while its model's slot lasts (at most models × boxes). The busy seconds
    stay per (client, model): an app's share of the fleet, not of one box."""

    def __init__(self, inflight: InFlight, *, boxed: bool = False) -> None:
        self.inflight = inflight
        self.boxed = boxed
        self._pairs: set[tuple[str, str]] = set()
        """(model, box) pairs that have waited (several boxes only)."""

    def describe(self) -> Iterator[Metric]:
        # Registering must not compute a scrape; the families are all it needs.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        waiting_f, oldest_f, busy_f = self._families()
        inflight = self.inflight
        now = inflight.clock()
        waiting = inflight.waiting()
        if self.boxed:
            self._per_box(waiting_f, oldest_f, waiting, now)
        else:
            for model in sorted(inflight.models() | waiting.keys()):
                entries = waiting.get(model, [])
                waiting_f.add_metric([model], len(entries))
                oldest_f.add_metric([model], now - entries[0].ex.started if entries else 0.0)
        for (client, model), seconds in sorted(inflight.busy_seconds().items()):
            busy_f.add_metric([client, model], seconds)
        yield from (waiting_f, oldest_f, busy_f)

    def _per_box(
        self,
        waiting_f: GaugeMetricFamily,
        oldest_f: GaugeMetricFamily,
        waiting: dict[str, list[Entry]],
        now: float,
    ) -> None:
        by_pair: dict[tuple[str, str], list[Entry]] = {}
        for model, entries in waiting.items():
            for entry in entries:  # oldest first, and so within each box
                by_pair.setdefault((model, entry.ex.box), []).append(entry)
        busy = self.inflight.models()
        self._pairs = {p for p in self._pairs if p[0] in busy} | by_pair.keys()
        for pair in sorted(self._pairs):
            entries = by_pair.get(pair, [])
            waiting_f.add_metric(list(pair), len(entries))
            oldest_f.add_metric(list(pair), now - entries[0].ex.started if entries else 0.0)

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        per_box = ("upstream",) if self.boxed else ()
        return (
            GaugeMetricFamily(WAITING.name, WAITING.help, labels=(*WAITING.labels, *per_box)),
            GaugeMetricFamily(
                OLDEST_WAIT.name, OLDEST_WAIT.help, labels=(*OLDEST_WAIT.labels, *per_box)
            ),
            CounterMetricFamily(CLIENT_BUSY.name, CLIENT_BUSY.help, labels=CLIENT_BUSY.labels),
        )


def register(registry: CollectorRegistry, inflight: InFlight, *, boxed: bool = False) -> None:
    registry.register(InFlightCollector(inflight, boxed=boxed))

"""Histograms counted by hand: the request families are fed on every exchange (and the
inter-token one on every token), so their updates must cost next to nothing.

prometheus_client's `Histogram.observe` takes a lock and walks the buckets in Python, a cost
paid about ten times per exchange and once per relayed token (docs/performance-log.md has the
figures). Here an observation is one C-level bisect and two list updates, with no lock:
every update happens on the event loop, and so does `collect()` (the metrics handler runs
there). The families are exposed through the library's
custom-collector API, so exposition, content negotiation and `get_sample_value` are the
library's own; a test holds the exposition equal to the library's Histogram. Like the
library's families here (ollama_tap/metrics/__init__.py), they carry no `_created` series.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class Series:
    """One label set's buckets (non-cumulative; the last one is +Inf) and sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left finds the first bound >= value: Prometheus buckets are "le".
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_times(self, value: float, times: int) -> None:
        """`observe(value)` `times` times (the zero gaps of the tokens one read carried)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times


class LoopHistogram(Collector):
    """A histogram family with `labelnames`, registered on `registry`; updated and collected
    on the event loop only."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.bounds = tuple(float(b) for b in buckets if b != math.inf)
        self._series: dict[tuple[str, ...], Series] = {}
        registry.register(self)

    def __getitem__(self, values: tuple[str, ...]) -> Series:
        """The series of a label set (made on first use): `family[endpoint, model]`."""
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = Series(self.bounds)
        return series

    def drop(self, label: str, value: str) -> None:
        """Remove every series whose `label` is `value`."""
        if label not in self.labelnames:
            return
        at = self.labelnames.index(label)
        for values in [values for values in self._series if values[at] == value]:
            del self._series[values]

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [*(floatToGoString(b) for b in self.bounds), "+Inf"]  # type: ignore[no-untyped-call]
        for values, series in self._series.items():
            cumulative, running = [], 0
            for le, count in zip(les, series.counts, strict=True):
                running += count
                cumulative.append((le, running))
            family.add_metric(list(values), cumulative, series.total)
        yield family

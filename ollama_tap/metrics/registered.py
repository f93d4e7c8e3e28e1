"""The families of families.py on a registry, grouped as their feeders hold them."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

from ollama_tap.exchange import Retry
from ollama_tap.metrics.families import (
    BUILD_INFO,
    CACHED_TOKENS,
    CLIENT_TTFT,
    COLD_STARTS,
    CONTEXT_TOKENS,
    DB_SIZE,
    DECODE_RATE,
    DECODE_SECONDS,
    DECODE_TOKENS,
    DURATION,
    EVAL,
    GENERATION_TOKENS,
    IN_FLIGHT,
    INTER_TOKEN,
    LOAD,
    MODEL_CONTEXT_LENGTH,
    MODEL_INFO,
    MODEL_LOADED,
    MODEL_SIZE,
    MODEL_UNLOADS,
    MODEL_VRAM,
    OUTPUT_RATE,
    POLL_ERRORS,
    PREFILL_RATE,
    PREFILL_SECONDS,
    PREFILL_TOKENS,
    PROMPT_EVAL,
    PROMPT_TOKENS,
    QUEUE_DEPTH,
    QUEUE_WAIT,
    RECORDS_DROPPED,
    REQUEST_ERRORS,
    REQUESTS,
    RESPONSES,
    RETRIES,
    TTFC,
    TTFT,
    UPSTREAM_INFO,
    UPSTREAM_UP,
    UTILIZATION,
    WRITE_ERRORS,
    Family,
)
from ollama_tap.metrics.histogram import LoopHistogram

_C = TypeVar("_C")


def counter(r: CollectorRegistry, family: Family) -> Counter:
    return Counter(family.name, family.help, family.labels, registry=r)


def gauge(r: CollectorRegistry, family: Family) -> Gauge:
    return Gauge(family.name, family.help, family.labels, registry=r)


def histogram(r: CollectorRegistry, family: Family) -> LoopHistogram:
    # Counted by hand (histogram.py): every exchange observes some ten of these. Indexed
    # like `Children` (family[endpoint, model]), with its series kept by the family itself.
    return LoopHistogram(r, family.name, family.help, family.labels, family.buckets)


class Children(dict[tuple[str, ...], _C]):
    """A labelled family's children by label values: made by `.labels()` on the first lookup
    of a label set, one dict lookup after that.

    `.labels()` checks and stringifies the values, takes the family's lock and looks the child
    up, and an exchange needs some twenty children. Keeping them is safe because a request
    family loses children only through `drop` (a model's label slot freed, which removes them
    from the family too), and the dict is bounded as the labels are: endpoints are fixed
    templates, ModelLabels bounds the models, the other labels are closed sets.
    """

    __slots__ = ("labelnames", "make", "remove")

    def __init__(
        self,
        make: Callable[..., _C],
        remove: Callable[..., None] | None = None,
        labelnames: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.make = make
        self.remove = remove
        self.labelnames = tuple(labelnames)

    def __missing__(self, values: tuple[str, ...]) -> _C:
        child = self[values] = self.make(*values)
        return child

    def drop(self, label: str, value: str) -> None:
        """Remove every child whose `label` is `value`, here and in the family."""
        if label not in self.labelnames or self.remove is None:
            return
        at = self.labelnames.index(label)
        for values in [values for values in self if values[at] == value]:
            del self[values]
            self.remove(*values)


def _counters(r: CollectorRegistry, family: Family) -> Children[Counter]:
    made = counter(r, family)
    return Children(made.labels, made.remove, family.labels)


def _gauges(r: CollectorRegistry, family: Family) -> Children[Gauge]:
    made = gauge(r, family)
    return Children(made.labels, made.remove, family.labels)


def _version() -> str:
    try:
        return importlib.metadata.version("ollama-tap")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Counts:
    """The per-exchange counters and the in-flight gauge of one box (or of the only one).

    With several boxes each box has its own, on the box's registry, which the fleet serves
    under an `upstream` label (boxes/fleet.py, LabelledBoxes), as it serves the box's poller:
    counters and a gauge gain one series per box at most, while the histograms stay off the
    box (RequestMetrics) because a label there multiplies every bucket (docs/operations.md).
    """

    __slots__ = (
        *("requests", "errors", "in_flight", "responses", "retries", "cold_starts"),
        *("decode_tokens", "decode_seconds", "prefill_tokens", "prefill_seconds"),
        *("prompt_tokens", "cached_tokens", "generation_tokens", "families"),
    )

    def __init__(self, r: CollectorRegistry) -> None:
        self.requests = _counters(r, REQUESTS)
        self.errors = _counters(r, REQUEST_ERRORS)
        self.in_flight = _gauges(r, IN_FLIGHT)
        self.responses = _counters(r, RESPONSES)
        self.decode_tokens = _counters(r, DECODE_TOKENS)
        self.decode_seconds = _counters(r, DECODE_SECONDS)
        self.prefill_tokens = _counters(r, PREFILL_TOKENS)
        self.prefill_seconds = _counters(r, PREFILL_SECONDS)
        self.prompt_tokens = _counters(r, PROMPT_TOKENS)
        self.cached_tokens = _counters(r, CACHED_TOKENS)
        self.generation_tokens = _counters(r, GENERATION_TOKENS)
        self.cold_starts = _counters(r, COLD_STARTS)
        self.retries = _counters(r, RETRIES)
        for reason in Retry:
            self.retries[(reason.value,)].inc(0)  # every reason a series from the start
        self.families: tuple[Children[Counter] | Children[Gauge], ...] = (
            *(self.requests, self.errors, self.in_flight, self.responses),
            *(self.decode_tokens, self.decode_seconds, self.prefill_tokens, self.prefill_seconds),
            *(self.prompt_tokens, self.cached_tokens, self.generation_tokens, self.cold_starts),
        )


class RequestMetrics:
    """The metrics observer's families (as `Children`), the build info and the standard
    collectors on one registry.

    `boxes` maps each box's name to the registry its `Counts` go on (and "" to those of the
    exchanges no box served); without it there is one `Counts`, on `r`, for every exchange.
    """

    def __init__(
        self, r: CollectorRegistry, boxes: Mapping[str, CollectorRegistry] | None = None
    ) -> None:
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        gauge(r, BUILD_INFO).labels(_version(), platform.python_version()).set(1)
        self.by_box = {name: Counts(registry) for name, registry in (boxes or {}).items()}
        self.other = self.by_box[""] if self.by_box else Counts(r)
        """The counts of an exchange whose box has none of its own: with one box, all."""
        self.duration = histogram(r, DURATION)
        self.ttft = histogram(r, TTFT)
        self.ttfc = histogram(r, TTFC)
        self.client_ttft = histogram(r, CLIENT_TTFT)
        self.inter_token = histogram(r, INTER_TOKEN)
        self.output_rate = histogram(r, OUTPUT_RATE)
        self.load = histogram(r, LOAD)
        self.queue = histogram(r, QUEUE_WAIT)
        self.prompt_eval = histogram(r, PROMPT_EVAL)
        self.eval = histogram(r, EVAL)
        self.decode_rate = histogram(r, DECODE_RATE)
        self.prefill_rate = histogram(r, PREFILL_RATE)
        self.context_tokens = histogram(r, CONTEXT_TOKENS)
        self.utilization = histogram(r, UTILIZATION)
        counted = self.by_box.values() if self.by_box else (self.other,)
        self._per_request: tuple[Children[Counter] | Children[Gauge] | LoopHistogram, ...] = (
            *(family for counts in counted for family in counts.families),
            *(self.duration, self.ttft, self.ttfc, self.inter_token, self.output_rate),
            *(self.load, self.queue, self.prompt_eval, self.eval, self.decode_rate),
            *(self.prefill_rate, self.context_tokens, self.utilization, self.client_ttft),
        )

    def counts(self, box: str) -> Counts:
        """The counts of an exchange that went to `box` (its `Exchange.box`)."""
        return self.by_box.get(box, self.other)

    def forget_model(self, model: str) -> None:
        """Drop every series labelled `model` (its label slot was freed)."""
        for family in self._per_request:
            family.drop("model", model)

    def forget_client(self, client: str) -> None:
        """Drop every series labelled `client` (its label slot was freed)."""
        for family in self._per_request:
            family.drop("client", client)


class UpstreamMetrics:
    """The poller's families."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.up = gauge(r, UPSTREAM_UP)
        self.info = gauge(r, UPSTREAM_INFO)
        self.poll_errors = counter(r, POLL_ERRORS)
        self.loaded = gauge(r, MODEL_LOADED)
        self.vram = gauge(r, MODEL_VRAM)
        self.size = gauge(r, MODEL_SIZE)
        self.context_length = gauge(r, MODEL_CONTEXT_LENGTH)
        self.unloads = counter(r, MODEL_UNLOADS)
        self.model_info = gauge(r, MODEL_INFO)


class RecorderMetrics:
    """The recorder's families: registered on the injected registry whatever the mode, so
    dashboards see zeros."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = counter(registry, RECORDS_DROPPED)
        self.write_errors = counter(registry, WRITE_ERRORS)
        self.queue_depth = gauge(registry, QUEUE_DEPTH)
        self.db_size = gauge(registry, DB_SIZE)

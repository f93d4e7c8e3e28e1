"""Boxes: every box's own poller, load tracker and truncation rules, the router between them,
the answers made of all of them, and their metrics under an `upstream` label."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ollama_tap.boxes.box import Box
from ollama_tap.boxes.router import Router
from ollama_tap.boxes.unions import Unions
from ollama_tap.config import Settings
from ollama_tap.exchange import Exchange
from ollama_tap.facts import RouteTier
from ollama_tap.hooks import phase_of
from ollama_tap.loads.tracker import LoadTracker
from ollama_tap.metrics.families import ROUTED
from ollama_tap.metrics.registered import counter
from ollama_tap.names import ModelLabels
from ollama_tap.truncation.observer import TruncationObserver
from ollama_tap.upstream import UpstreamPoller


class Boxes:
    """The boxes of the settings. With one plain upstream there is no router and the box's
    metrics are the registry's own, exactly as before boxes existed; with named boxes each
    keeps its families on a registry of its own, which `LabelledBoxes` serves with an
    `upstream` label (bounded: the configured names are its only values). The request
    counters of the exchanges no box served (a union of every box's listing, a management
    request refused for want of a box) go on one more, labelled `upstream=""`, which
    Prometheus stores as no label at all."""

    def __init__(
        self, settings: Settings, registry: CollectorRegistry, labels: ModelLabels
    ) -> None:
        self.named = settings.named_boxes
        self.boxes: list[Box] = []
        self.registries: list[tuple[str, CollectorRegistry]] = []
        for index, spec in enumerate(settings.boxes):
            own = CollectorRegistry(auto_describe=True) if self.named else registry
            poller = UpstreamPoller(settings, own, labels, box=spec)
            # The analysers ask the poller's state itself, which answers compiled.
            loads = LoadTracker(own, labels, poller.polled)
            loads.box = spec.name if self.named else ""
            truncation = TruncationObserver(own, labels, poller.polled, loads.stale_row)
            poller.on_ps(loads.ps)
            self.boxes.append(Box(spec, index, poller, loads, truncation))
            self.registries.append((spec.name, own))
        self.first = self.boxes[0]
        self.router: Router | None = None
        self.unions = Unions(self.boxes)
        self.counted: dict[str, CollectorRegistry] | None = None
        """Where the metrics observer counts each box's exchanges (RequestMetrics): None
        with one box (on the registry, unlabelled)."""
        routed = counter(registry, ROUTED)  # registered always, a series only per named box
        self.routed: dict[tuple[str, str], Any] = {}
        if self.named:
            self.router = Router(self.boxes, affinity=settings.affinity == "client")
            self.counted = {**dict(self.registries), "": CollectorRegistry(auto_describe=True)}
            registry.register(LabelledBoxes(list(self.counted.items())))
            self.routed = {
                (b.name, t.value): routed.labels(b.name, t.value)
                for b in self.boxes
                for t in RouteTier
            }
            for child in self.routed.values():
                child.inc(0)
            # Every box's /api/tags is read when a name is new to the labels.
            labels.set_refresher(self.refresh_tags)
        self.by_name = {box.name: box for box in self.boxes}

    def refresh_tags(self) -> None:
        for box in self.boxes:
            box.poller.refresh_tags()

    def observers(self) -> list[object]:
        """The analysis observers of the boxes, in hook order (truncation asks the tracker
        before the tracker's own `response`)."""
        if not self.named:
            return [self.first.truncation, self.first.loads]
        return [
            PerBox("truncation", {b.name: b.truncation for b in self.boxes}),
            PerBox("loads", {b.name: b.loads for b in self.boxes}),
        ]

    async def start(self) -> None:
        for box in self.boxes:
            await box.poller.start()

    async def stop(self) -> None:
        for box in self.boxes:
            await box.poller.stop()
        await self.unions.close()

    # What the request metrics, the spans and the recorder ask: the exchange's box's answer.

    def context_length(self, model: str | None) -> int | None:
        """The runtime context of a loaded model on the first box that has it loaded."""
        return next(
            (c for b in self.boxes if (c := b.poller.context_length(model)) is not None), None
        )

    def poke_ps(self, then: Any = None) -> None:
        """Read every box's /api/ps soon; `then` after the first box's read."""
        for box in self.boxes[1:]:
            box.poller.poke_ps()
        self.first.poller.poke_ps(then)

    def digest_of(self, model: str | None) -> str | None:
        # A loop, not next() over a generator: the recorder asks once per exchange.
        for box in self.boxes:
            if digest := box.poller.polled.digest_of(model):
                return digest
        return None

    def version_of(self, ex: Exchange) -> str | None:
        box = self.by_name.get(ex.box)
        return box.poller.version if box is not None else None

    @property
    def up(self) -> bool:
        return any(b.poller.up for b in self.boxes)


class PerBox:
    """One observer per box behind one name: each exchange's hooks go to the observer of
    the box it went to (none for an exchange no box served). It runs in the phase of the
    observers it stands for (a dispatcher, not an observer with findings of its own)."""

    def __init__(self, name: str, by_box: dict[str, Any]) -> None:
        self.name = name
        self.by_box = by_box
        self.phase = phase_of(next(iter(by_box.values())))

    def _call(self, hook: str, ex: Exchange) -> None:
        observer = self.by_box.get(ex.box)
        method = getattr(observer, hook, None)
        if method is not None:
            method(ex)

    def request(self, ex: Exchange) -> None:
        self._call("request", ex)

    def response(self, ex: Exchange) -> None:
        self._call("response", ex)

    def error(self, ex: Exchange) -> None:
        self._call("error", ex)


class LabelledBoxes(Collector):
    """Every box's poller, load, truncation and request-counter families at scrape time,
    each sample with its box's name as `upstream`, one family per name across the boxes."""

    def __init__(self, registries: list[tuple[str, CollectorRegistry]]) -> None:
        self.registries = registries

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for name, registry in self.registries:
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for s in family.samples:
                    merged.add_sample(
                        s.name, {**s.labels, "upstream": name}, s.value, s.timestamp, s.exemplar
                    )
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())

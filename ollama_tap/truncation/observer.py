"""The observer that gives each finished exchange its truncation verdict (rules.py), counts
it, and leaves it on the exchange (`Exchange.truncation`) for the recorder and the spans."""

from __future__ import annotations

from typing import Final, Protocol

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.cloud import LOCAL, location
from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.measures import cold_start, request_num_ctx
from ollama_tap.metrics.families import TRUNCATIONS
from ollama_tap.metrics.registered import Children, counter
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.version import parse_version
from ollama_tap.truncation.rules import Runtime, judge

NAME: Final = "truncation"

log = structlog.get_logger("ollama_tap.truncation")


class Upstream(Protocol):
    """What the observer asks of the poller."""

    def context_length(self, model: str | None) -> int | None: ...

    @property
    def version(self) -> str | None: ...


def runtime_context(request_ctx: int | None, loaded_ctx: int | None, cold: bool) -> int | None:
    """C for one exchange: the runner's context is the request's num_ctx capped at the
    model's training context, and /api/ps shows it. When the model was (re)loaded for this
    reply the last /api/ps may describe the runner before, so the request's num_ctx (an
    upper bound of C) wins unless they agree: a C too large only misses, never accuses."""
    if request_ctx is None:
        return loaded_ctx
    if loaded_ctx is None or cold:
        return request_ctx
    return min(request_ctx, loaded_ctx)


class TruncationObserver:
    """Runs the rules once per exchange, at its end, for local models only (C4: a cloud
    model's context is not the box's); counts `ollama_tap_truncations_total`."""

    name = NAME
    phase = Phase.ANALYSIS

    def __init__(
        self,
        registry: CollectorRegistry,
        labels: ModelLabels,
        upstream: Upstream | None = None,
    ) -> None:
        made = counter(registry, TRUNCATIONS)
        self.counts = Children(made.labels, made.remove, TRUNCATIONS.labels)
        self.labels = labels
        self.upstream = upstream
        labels.on_free(lambda model: self.counts.drop("model", model))

    def response(self, ex: Exchange) -> None:
        if location(ex) != LOCAL:
            return
        upstream = self.upstream
        loaded = upstream.context_length(ex.model) if upstream is not None else None
        cold = ex.usage is not None and cold_start(ex.usage)
        c = runtime_context(request_num_ctx(ex.request.options), loaded, cold)
        version = parse_version(upstream.version) if upstream is not None else None
        verdict = judge(ex, Runtime(c, version))
        if verdict is None:
            return
        ex.truncation = verdict
        self.counts[ex.endpoint, self.labels.label(ex.model), verdict.kind.value].inc()
        log.warning(
            "truncation", id=ex.id, model=ex.model, kind=verdict.kind.value,
            rule=verdict.rule, context=c, explanation=verdict.explanation,
        )  # fmt: skip

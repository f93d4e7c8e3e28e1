"""The load tracker's families on a registry, bounded as the `model` labels are."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from ollama_tap.metrics.families import (
    CONTEXT_REDUCED,
    MODEL_EVICTIONS,
    MODEL_LOADS,
    RELOAD_PREDICTED,
    Family,
)
from ollama_tap.metrics.registered import Children, counter


def _children(r: CollectorRegistry, family: Family) -> Children[Counter]:
    made = counter(r, family)
    return Children(made.labels, made.remove, family.labels)


class LoadMetrics:
    """loads by cause, evictions by the evicting model, predicted reloads by field."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.loads = _children(r, MODEL_LOADS)
        self.evictions = _children(r, MODEL_EVICTIONS)
        self.predicted = _children(r, RELOAD_PREDICTED)
        self.reduced = _children(r, CONTEXT_REDUCED)

    def forget_model(self, model: str) -> None:
        """Drop every series that names `model`, as the model or as the evicting one."""
        for family in (self.loads, self.evictions, self.predicted, self.reduced):
            family.drop("model", model)
        self.evictions.drop("by", model)

"""The observer's child cache: the library's own children, made only when first looked up."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from ollama_tap.metrics import families as table
from ollama_tap.metrics.families import Family
from ollama_tap.metrics.histogram import LoopHistogram
from ollama_tap.metrics.registered import Children, RequestMetrics


def test_children_are_the_familys_own_and_made_on_first_lookup() -> None:
    registry = CollectorRegistry()
    family = Counter("x_total", "X.", ["endpoint", "model"], registry=registry)
    children = Children(family.labels)
    assert registry.get_sample_value("x_total", {"endpoint": "e", "model": "m"}) is None
    children["e", "m"].inc()
    children["e", "m"].inc(2)
    assert children["e", "m"] is family.labels("e", "m")
    assert registry.get_sample_value("x_total", {"endpoint": "e", "model": "m"}) == 3
    assert len(children) == 1


def _series_of(registry: CollectorRegistry, model: str) -> set[str]:
    """The families with a sample labelled `model`."""
    return {
        metric.name
        for metric in registry.collect()
        for s in metric.samples
        if s.labels.get("model") == model
    }


def test_forget_model_drops_its_series_from_every_request_family() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry)
    with_model = {
        f.name.removesuffix("_total")  # as the library names a counter's family
        for f in vars(table).values()
        if isinstance(f, Family) and "model" in f.labels
    }
    registered = {metric.name for metric in registry.collect()} & with_model
    for family in (getattr(m, name) for name in dir(m) if not name.startswith("__")):
        if not isinstance(family, Children | LoopHistogram):
            continue
        for model in ("gone:latest", "kept:latest"):
            values = tuple(model if label == "model" else "x" for label in family.labelnames)
            child = family[values]
            child.observe(1.0) if isinstance(family, LoopHistogram) else child.inc()
    assert _series_of(registry, "gone:latest") == registered, "every family was filled"
    m.forget_model("gone:latest")
    assert _series_of(registry, "gone:latest") == set()
    assert _series_of(registry, "kept:latest") == registered
    gone = {label: "gone:latest" if label == "model" else "x" for label in m.requests.labelnames}
    m.requests[tuple(gone.values())].inc()  # the cache let go of the removed child too
    assert registry.get_sample_value("ollama_tap_requests_total", gone) == 1


def test_forget_client_drops_its_series_from_the_client_families() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry)
    for client in ("gone", "kept"):
        for family in (m.requests, m.errors, m.in_flight, m.prompt_tokens, m.generation_tokens):
            family[tuple(client if n == "client" else "x" for n in family.labelnames)].inc()
    m.forget_client("gone")
    clients = {
        s.labels["client"]
        for metric in registry.collect()
        for s in metric.samples
        if "client" in s.labels
    }
    assert clients == {"kept"}

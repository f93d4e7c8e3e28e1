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
    held = (m, m.other)
    for family in (getattr(o, n) for o in held for n in dir(o) if not n.startswith("__")):
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
    requests = m.other.requests
    gone = {label: "gone:latest" if label == "model" else "x" for label in requests.labelnames}
    requests[tuple(gone.values())].inc()  # the cache let go of the removed child too
    assert registry.get_sample_value("ollama_tap_requests_total", gone) == 1


def test_forget_client_drops_its_series_from_the_client_families() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry)
    for client in ("gone", "kept"):
        c = m.other
        for family in (c.requests, c.errors, c.in_flight, c.prompt_tokens, c.generation_tokens):
            family[tuple(client if n == "client" else "x" for n in family.labelnames)].inc()
    m.forget_client("gone")
    clients = {
        s.labels["client"]
        for metric in registry.collect()
        for s in metric.samples
        if "client" in s.labels
    }
    assert clients == {"kept"}


def test_forget_model_drops_its_series_on_every_box() -> None:
    boxes = {name: CollectorRegistry() for name in ("gpu1", "gpu2", "")}
    m = RequestMetrics(CollectorRegistry(), boxes)
    for box in boxes:
        for model in ("gone:latest", "kept:latest"):
            m.counts(box).requests[("/api/chat", model, "app", "200", "local")].inc()
    m.forget_model("gone:latest")
    assert not any(_series_of(r, "gone:latest") for r in boxes.values())
    assert all(_series_of(r, "kept:latest") == {"ollama_tap_requests"} for r in boxes.values())
    assert m.counts("elsewhere") is m.counts("") is not m.counts("gpu1")

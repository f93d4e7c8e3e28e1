"""The observer's child cache: the library's own children, made only when first looked up."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from proxy.metrics.registered import Children


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

"""The hand-counted histograms expose exactly what prometheus_client's would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from ollama_tap.metrics.histogram import LoopHistogram

BUCKETS = (0.0005, 0.001, 0.005, 0.1, 1, 10)
GAPS = [0.0001, 0.0005, 0.0007, 0.001, 0.004, 0.2, 0.2, 3.0, 10.0, 42.0]


@pytest.mark.parametrize("render", [generate_latest, generate_openmetrics])
def test_same_exposition_as_the_librarys_histogram(render: object) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopHistogram(ours, "x_gap_seconds", "Gaps.", ["endpoint", "model"], BUCKETS)
    ref = Histogram(
        "x_gap_seconds", "Gaps.", ["endpoint", "model"], buckets=BUCKETS, registry=theirs
    )
    for gap in GAPS:
        mine["/api/chat", "m:latest"].observe(gap)
        ref.labels("/api/chat", "m:latest").observe(gap)
    text = render(ours)  # type: ignore[operator]
    assert text == render(theirs)  # type: ignore[operator]
    assert b"_created" not in text  # ollama_tap/metrics/__init__.py turned them off


def test_samples_read_back_through_the_registry() -> None:
    registry = CollectorRegistry()
    hist = LoopHistogram(registry, "x_gap_seconds", "Gaps.", ["endpoint", "model"], BUCKETS)
    for gap in GAPS:
        hist["e", "m"].observe(gap)
    labels = {"endpoint": "e", "model": "m"}
    assert registry.get_sample_value("x_gap_seconds_count", labels) == len(GAPS)
    assert registry.get_sample_value("x_gap_seconds_sum", labels) == pytest.approx(sum(GAPS))
    assert registry.get_sample_value("x_gap_seconds_bucket", {**labels, "le": "0.0005"}) == 2
    assert registry.get_sample_value("x_gap_seconds_bucket", {**labels, "le": "10.0"}) == 9
    assert registry.get_sample_value("x_gap_seconds_bucket", {**labels, "le": "+Inf"}) == 10


def test_a_second_family_with_the_same_name_is_refused() -> None:
    registry = CollectorRegistry()
    LoopHistogram(registry, "x_gap_seconds", "Gaps.", ["endpoint"], BUCKETS)
    with pytest.raises(ValueError, match="Duplicated"):
        LoopHistogram(registry, "x_gap_seconds", "Gaps.", ["endpoint"], BUCKETS)


def test_observe_times_is_observe_repeated() -> None:
    once, many = CollectorRegistry(), CollectorRegistry()
    a = LoopHistogram(once, "x_gap_seconds", "Gaps.", ["e"], BUCKETS)
    b = LoopHistogram(many, "x_gap_seconds", "Gaps.", ["e"], BUCKETS)
    for _ in range(7):
        a["e",].observe(0.002)
    b["e",].observe_times(0.002, 7)
    assert generate_latest(once) == generate_latest(many)

"""Reading one value from a registry by some of its labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def sample_value(
    registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None
) -> float | None:
    """The sum of the samples called `name` whose labels include `labels` (all of them when
    it names every label), None when none does: a test names the labels it is about, and
    a label added to a family (`location`) does not change what it reads."""
    wanted = (labels or {}).items()
    found = [
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and wanted <= s.labels.items()
    ]
    return sum(found) if found else None

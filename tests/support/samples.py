"""One sample value from a registry, by the labels a test names (the others summed over)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def sample_value(
    registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None
) -> float | None:
    """The sum of the samples called `name` whose labels include `labels`; None when none
    does. A label a test does not name (`client`, say) is summed over, so a test of the
    model label needs no knowledge of the others."""
    wanted = (labels or {}).items()
    found = [
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and wanted <= s.labels.items()
    ]
    return sum(found) if found else None

"""The metric families as the proxy registers them, the table of families.py and the README's
"Metric reference": the same names, and the table's types are the registered ones."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from ollama_tap.app import make_app
from ollama_tap.config import Settings
from ollama_tap.metrics import families
from ollama_tap.metrics.families import Family

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Metric reference"
NAME = re.compile(r"ollama_tap_[a-z_]+")
TABLE = {v.name: v for v in vars(families).values() if isinstance(v, Family)}


def readme_names() -> set[str]:
    text = README.read_text(encoding="utf-8")
    assert text.count(f"\n{SECTION}\n") == 1, f"the README has no single {SECTION!r} section"
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    return set(NAME.findall(section))


def registered(tmp_path: Path) -> dict[str, str]:
    """The ollama_tap_* families a whole proxy registers, by name, with their types (the
    reload guard's only when it is on: on here)."""
    registry = CollectorRegistry()
    settings = Settings.model_validate({"db": tmp_path / "records.db", "reload_guard": True})
    make_app(settings, registry=registry)
    return {
        # The library names a counter's family without its _total.
        metric.name + ("_total" if metric.type == "counter" else ""): metric.type
        for metric in registry.collect()
        if metric.name.startswith("ollama_tap_")
    }


def test_every_family_is_in_the_readme_and_every_readme_name_is_a_family() -> None:
    documented = readme_names()
    assert sorted(TABLE.keys() - documented) == [], "families missing from the README"
    assert sorted(documented - TABLE.keys()) == [], "README names that are no family"


def test_the_proxy_registers_the_table_and_nothing_else(tmp_path: Path) -> None:
    assert registered(tmp_path) == {name: family.kind for name, family in TABLE.items()}


def test_histograms_have_buckets_and_the_others_none() -> None:
    for family in TABLE.values():
        assert bool(family.buckets) == (family.kind == "histogram"), family.name
        assert list(family.buckets) == sorted(set(family.buckets)), family.name

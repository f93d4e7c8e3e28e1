"""Model names by Ollama's rules and the bounded label set."""

from __future__ import annotations

import random
import string

import pytest
from prometheus_client import CollectorRegistry, Counter

from proxy.names import OTHER, ModelLabels, canonical_model, is_valid_name, model_key


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("llama3.2", "llama3.2:latest"),
        ("llama3.2:latest", "llama3.2:latest"),
        ("llama3.2:3b", "llama3.2:3b"),
        ("library/llama3.2", "llama3.2:latest"),
        ("registry.ollama.ai/library/llama3.2:latest", "llama3.2:latest"),
        ("Registry.Ollama.AI/Library/Llama3.2", "Llama3.2:latest"),
        ("user/model", "user/model:latest"),
        ("registry.ollama.ai/user/model:7b", "user/model:7b"),
        ("hf.co/user/repo:Q4_K_M", "hf.co/user/repo:Q4_K_M"),
        ("hf.co/user/repo", "hf.co/user/repo:latest"),
        ("https://hf.co/user/repo:Q8_0", "hf.co/user/repo:Q8_0"),
        ("localhost:5000/ns/model", "localhost:5000/ns/model:latest"),
        ("llama3.2@sha256:" + "a" * 64, "llama3.2:latest"),
        ("llama3.2:1b@sha256:" + "b" * 64, "llama3.2:1b"),
        ("gpt-oss:120b-cloud", "gpt-oss:120b-cloud"),
    ],
)
def test_canonical_model(name: str, canonical: str) -> None:
    assert canonical_model(name) == canonical


def test_model_key_is_case_insensitive() -> None:
    assert model_key("LLAMA3.2") == model_key("registry.ollama.ai/library/llama3.2:latest")
    assert model_key("llama3.2:1b") != model_key("llama3.2")


@pytest.mark.parametrize(
    "name",
    [
        "tell me a secret",
        "",
        ":latest",
        "llama3.2:",
        "/m",
        "-model",
        "a" * 81,
        "m:" + "t" * 81,
        "x\n",
    ],
)
def test_names_ollama_refuses_are_invalid(name: str) -> None:
    assert not is_valid_name(name)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Refresher:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def labels_with(cap: int = 3) -> tuple[ModelLabels, Refresher, FakeClock]:
    clock, refresher = FakeClock(), Refresher()
    labels = ModelLabels(cap, refresh_interval=5.0, clock=clock)
    labels.set_refresher(refresher)
    return labels, refresher, clock


def test_no_model_is_empty_label() -> None:
    labels, refresher, _ = labels_with()
    assert [labels.label(v) for v in (None, "", 3, ["x"])] == ["", "", "", ""]
    assert refresher.calls == 0


def test_known_names_print_as_ollama_reports_them() -> None:
    labels, refresher, _ = labels_with(cap=1)
    labels.set_known("tags", ["llama3.2:latest", "hf.co/User/Repo:Q4_K_M"])
    assert labels.label("llama3.2") == "llama3.2:latest"
    assert labels.label("LLAMA3.2:latest") == "llama3.2:latest"
    assert labels.label("registry.ollama.ai/library/llama3.2") == "llama3.2:latest"
    assert labels.label("hf.co/user/repo:q4_k_m") == "hf.co/User/Repo:Q4_K_M"
    assert refresher.calls == 0


def test_extras_up_to_the_cap_then_other() -> None:
    labels, _, _ = labels_with(cap=2)
    assert labels.label("a") == "a:latest"
    assert labels.label("b:1") == "b:1"
    assert labels.label("c") == OTHER
    assert labels.label("A:latest") == "a:latest", "an admitted extra keeps its label"


def test_invalid_names_are_other_without_refresh() -> None:
    labels, refresher, _ = labels_with()
    assert labels.label("Summarize this document: ...") == OTHER
    assert refresher.calls == 0


def test_unknown_name_triggers_one_refresh_per_interval() -> None:
    labels, refresher, clock = labels_with(cap=100)
    for name in ("new1", "new2", "new3"):
        labels.label(name)
    assert refresher.calls == 1
    clock.now += 4.9
    labels.label("new4")
    assert refresher.calls == 1
    clock.now += 0.2
    labels.label("new5")
    assert refresher.calls == 2
    labels.label("new1")
    assert refresher.calls == 2, "an admitted extra asks for nothing"


def test_a_refresh_that_finds_the_name_frees_its_slot() -> None:
    labels, _, _ = labels_with(cap=1)
    assert labels.label("fresh") == "fresh:latest"
    assert labels.label("late") == OTHER
    labels.set_known("tags", ["fresh:latest", "late:latest"])
    assert labels.label("late") == "late:latest"
    assert labels.label("another") == "another:latest", "the freed slot is reused"


def test_known_set_is_the_union_of_sources() -> None:
    labels, _, _ = labels_with(cap=1)
    labels.set_known("tags", ["a:latest"])
    labels.set_known("ps", ["b:latest"])
    assert labels.is_known("a")
    assert labels.is_known("b")
    labels.set_known("ps", [])
    assert labels.is_known("a")
    assert not labels.is_known("b")


def test_ten_thousand_random_names_stay_bounded() -> None:
    registry = CollectorRegistry()
    counter = Counter("t_requests_total", "test", ["model"], registry=registry)
    labels, refresher, _ = labels_with(cap=100)
    labels.set_known("tags", ["llama3.2:latest", "qwen3:8b"])
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " /:@.-_\n"
    for _ in range(10_000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        counter.labels(labels.label(name)).inc()
    for name in ("llama3.2", "llama3.2:latest", "QWEN3:8b"):
        counter.labels(labels.label(name)).inc()
    series = {
        s.labels["model"]
        for metric in registry.collect()
        for s in metric.samples
        if s.name == "t_requests_total"
    }
    assert len(series) <= 100 + 2 + 1
    assert {"llama3.2:latest", "qwen3:8b", OTHER} <= series
    assert refresher.calls == 1


def test_recordable_keeps_only_names_ollama_would_accept() -> None:
    from proxy.names import recordable

    assert recordable("llama3.2") == "llama3.2:latest"
    assert recordable(None) is None
    assert recordable("") is None
    assert recordable("Tell me a secret: the launch code is 1234") == "other"

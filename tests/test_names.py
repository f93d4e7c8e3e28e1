"""The bounded set of `model` label values."""

from __future__ import annotations

import random
import string

from prometheus_client import CollectorRegistry, Counter

from ollama_tap.names import OTHER, ModelLabels
from ollama_tap.ollama.names import model_key
from tests.support.exchanges import new_exchange


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


def answered(
    labels: ModelLabels, name: str, status: int = 200, endpoint: str = "/api/generate"
) -> str:
    """What the label is after Ollama answered `status` to a request naming `name`."""
    ex = new_exchange(endpoint, status=status)
    ex.request.model = name
    labels.response_headers(ex)
    return labels.label(name)


def test_a_name_gets_a_label_only_once_ollama_served_it() -> None:
    labels, _, _ = labels_with(cap=2)
    assert labels.label("a") == OTHER, "first sight is not enough"
    assert answered(labels, "a", 404) == OTHER
    assert answered(labels, "a", 400) == OTHER
    assert answered(labels, "a", 500) == OTHER
    assert answered(labels, "a", 200) == "a:latest"
    assert answered(labels, "B:1", 200, "/v1/chat/completions") == "B:1"
    assert answered(labels, "c", 200, "/api/embed") == OTHER, "past the cap of two"
    assert labels.label("A:latest") == "a:latest", "a proven name keeps its label"
    assert labels.label("b:1") == "B:1", "printed as first proven"


def test_only_routes_that_resolve_the_model_prove_it() -> None:
    labels, _, _ = labels_with(cap=10)
    for endpoint in ("/api/pull", "/api/push", "/api/create", "/api/delete", "/api/copy"):
        assert answered(labels, "mgmt", 200, endpoint) == OTHER, endpoint
    assert answered(labels, "shown", 200, "/api/show") == "shown:latest"
    assert answered(labels, "Summarize this: ...", 200) == OTHER, "never a name Ollama refuses"


def test_records_keep_the_name_as_typed_until_it_has_a_slot() -> None:
    labels, _, _ = labels_with(cap=10)
    labels.set_known("tags", ["hf.co/User/Repo:Q4_K_M"])
    assert labels.spelling("Typo-Model") == "Typo-Model:latest"
    assert labels.spelling("hf.co/user/repo:q4_k_m") == "hf.co/User/Repo:Q4_K_M"
    assert labels.spelling("Tell me a secret: 1234") == OTHER
    assert labels.spelling(None) is None


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


def test_a_listed_name_leaves_the_cap_and_takes_the_listed_spelling() -> None:
    labels, _, _ = labels_with(cap=1)
    freed: list[str] = []
    labels.on_free(freed.append)
    assert answered(labels, "fresh") == "fresh:latest"
    assert answered(labels, "late") == OTHER
    labels.set_known("tags", ["Fresh:latest", "late:latest"])
    assert labels.label("fresh") == "Fresh:latest"
    assert freed == ["fresh:latest"], "the spelling as proven labels nothing any more"
    assert labels.label("late") == "late:latest"
    assert answered(labels, "another") == "another:latest", "listing freed the slot"


def test_a_deleted_models_slot_is_freed_after_a_day_of_nothing() -> None:
    labels, _, clock = labels_with(cap=1)
    freed: list[str] = []
    labels.on_free(freed.append)
    labels.set_known("tags", ["gone:latest", "kept:latest"])
    clock.now += 3600
    labels.set_known("tags", ["kept:latest"])
    assert labels.label("gone") == "gone:latest", "a deleted model keeps its slot a while"
    clock.now += 86400 - 1
    labels.set_known("tags", ["kept:latest"])
    assert freed == []
    clock.now += 1
    labels.set_known("tags", ["kept:latest"])
    assert freed == ["gone:latest"]
    assert labels.label("gone") == OTHER
    assert labels.label("kept") == "kept:latest", "listed names are never freed"


def test_known_set_is_the_union_of_sources() -> None:
    labels, _, _ = labels_with(cap=1)
    labels.set_known("tags", ["a:latest"])
    labels.set_known("ps", ["b:latest"])
    assert labels.slots.is_listed(model_key("a"))
    assert labels.slots.is_listed(model_key("b"))
    labels.set_known("ps", [])
    assert labels.slots.is_listed(model_key("a"))
    assert not labels.slots.is_listed(model_key("b"))


def test_ten_thousand_random_names_stay_bounded() -> None:
    registry = CollectorRegistry()
    counter = Counter("t_requests_total", "test", ["model"], registry=registry)
    labels, refresher, _ = labels_with(cap=100)
    labels.set_known("tags", ["llama3.2:latest", "qwen3:8b"])
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + " /:@.-_\n"
    for i in range(10_000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        # Some answered 200 (an upstream that serves any name, as llama-server does).
        counter.labels(answered(labels, name, 200 if i % 10 == 0 else 404)).inc()
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
    from ollama_tap.names import recordable

    assert recordable("llama3.2") == "llama3.2:latest"
    assert recordable(None) is None
    assert recordable("") is None
    assert recordable("Tell me a secret: the launch code is 1234") == "other"

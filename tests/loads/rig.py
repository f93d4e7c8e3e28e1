"""A load tracker fed hand-built exchanges and /api/ps snapshots, for the tracker's tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Outcome, RequestFields, Usage
from ollama_tap.facts import ModelFacts, Standing
from ollama_tap.loads.tracker import LoadTracker
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.state import LoadedModel
from tests.support.exchanges import new_exchange

A, B = "llama3.2:latest", "qwen3:8b"


class Upstream:
    """The poller as the tracker sees it: fixed digests, facts and version."""

    def __init__(self, version: str = "0.33.0") -> None:
        self.version: str | None = version
        self.pokes = 0

    def digest_of(self, model: str | None) -> str | None:
        return {"llama3.2": "d-a", A: "d-a", B: "d-b"}.get(model or "")

    def runner_key(self, digest: str | None) -> str | None:
        return digest

    def model_facts(self, model: str | None) -> ModelFacts:
        return ModelFacts("llama", 131072, False, None)

    def standing(self, model: str | None) -> Standing:
        return Standing(self.digest_of(model), self.model_facts(model), self.version)

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        self.pokes += 1


class Rig:
    def __init__(self, version: str = "0.33.0") -> None:
        self.registry = CollectorRegistry()
        labels = ModelLabels(10)
        labels.set_known("tags", [A, B])
        self.tracker = LoadTracker(self.registry, labels, Upstream(version))
        self.clock = time.monotonic()
        """When the next request arrives: each reply moves it past its own end."""

    def start(self, model: str, *, client: str = "10.0.0.1", at: float | None = None,
              body: dict[str, Any] | None = None, **fields: Any) -> Any:  # fmt: skip
        ex = new_exchange("/api/chat", client=client)
        ex.request = RequestFields(model=model, parsed=True, **fields)
        ex.request_body = orjson.dumps({"model": model, **(body or {})})
        ex.started = self.clock if at is None else at
        self.tracker.request(ex)
        return ex

    def end(self, ex: Any, load: float = 0.0, *, error: str | None = None,
            done_reason: str = "stop", outcome: Outcome = Outcome.OK) -> None:  # fmt: skip
        ex.usage = Usage(load_duration=int(load * 1e9), has_timings=True)
        ex.error_message, ex.done_reason, ex.outcome = error, done_reason, outcome
        ex.ended = ex.started + load + 0.1
        self.clock = max(self.clock, ex.ended + 1.0)
        self.tracker.response(ex)

    def ps(self, rows: dict[str, int] | None, *, expires_in: float = 300.0) -> None:
        if rows is None:
            self.tracker.ps(None)
            return
        digests = {A: "d-a", B: "d-b"}
        snapshot = {
            name: LoadedModel(name, digests[name], 1, 1, ctx, name, time.time() + expires_in)
            for name, ctx in rows.items()
        }
        self.tracker.ps(snapshot)

    def causes(self) -> list[tuple[str, str]]:
        return [(e.model, str(e.cause)) for e in self.tracker.events]

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(f"ollama_tap_{name}", labels)

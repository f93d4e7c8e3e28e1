"""One box's runners by scheduler key, and how a model or an /api/ps row finds its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ollama_tap.facts import Standing
from ollama_tap.loads.state import Runner
from ollama_tap.ollama.names import model_key, valid_key
from ollama_tap.ollama.state import LoadedModel


class Upstream(Protocol):
    """What the tracker asks of the poller."""

    @property
    def version(self) -> str | None: ...

    def digest_of(self, model: str | None) -> str | None: ...

    def runner_key(self, digest: str | None) -> str | None: ...

    def standing(self, model: str | None) -> Standing: ...

    def poke_ps(self, then: Callable[[], None] | None = None) -> None: ...


class Runners(dict[str, Runner]):
    """Runners by Ollama's scheduler key: the runner key of the model's digest (names on one
    blob share a runner), or `name:KEY` while no digest is known."""

    def __init__(self, spelling: Callable[[str | None], str | None]) -> None:
        super().__init__()
        self.spelling = spelling
        """A runner's name as records spell it (ModelLabels.spelling)."""

    def key(self, upstream: Upstream, model: str) -> str:
        return self.key_of(upstream, model, upstream.digest_of(model))

    def key_of(self, upstream: Upstream, model: str, digest: str | None) -> str:
        """The key of `model`, whose manifest digest is `digest` (None: unknown)."""
        runner = upstream.runner_key(digest)
        if runner:
            return runner
        valid = valid_key(model)
        return f"name:{valid[0] if valid else model}"

    def row_key(self, upstream: Upstream, row: LoadedModel) -> str:
        key = upstream.runner_key(row.digest) or f"name:{model_key(row.name)}"
        alias = f"name:{model_key(row.name)}"
        if key != alias and alias in self and key not in self:
            # Seen by name before /api/tags told its digest: one runner.
            runner = self[key] = self.pop(alias)
            for pending in runner.flight.values():
                pending.key = key
        return key

    def of(self, key: str, name: str) -> Runner:
        """The runner of `key`, made (named `name`) when new."""
        runner = self.get(key)
        if runner is None:
            runner = self[key] = Runner(self.spelling(name) or name)
        return runner

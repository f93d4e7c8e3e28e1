"""What /api/show says of each model a box lists, read once per digest: the `model_info`
gauge's labels, the training context, vision, num_keep and the weights' blob."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ollama_tap.facts import NO_FACTS, ModelFacts
from ollama_tap.ollama.state import LocalModel, Shown, ShownFacts

SHOW_RETRY: Final = 300.0
"""Seconds before a model whose /api/show failed is asked again (not every round: each
failure is a poll error, and a hung one costs the whole timeout)."""


class ShownModels:
    """The /api/show facts of one box's models, by digest (or `name:KEY` without one)."""

    def __init__(self, model_info: Any) -> None:
        self.model_info = model_info
        """The `ollama_tap_model_info` gauge this box's series go on."""
        self._shown: dict[str, tuple[str, str, str]] = {}
        self._train: dict[str, ShownFacts] = {}
        """Training context (`<arch>.context_length` of /api/show), whether `capabilities`
        holds "vision", num_keep, the weights' blob, the Modelfile's runner PARAMETERs and
        its FROM/ADAPTER/DRAFT lines, by digest cache key."""
        self._facts: dict[str, ModelFacts] = {}
        """What `facts` answers, made from the two above when a model is shown."""
        self._info: dict[str, tuple[str, str, str, str]] = {}
        self._retry: dict[str, float] = {}

    def facts(self, key: str, local: LocalModel) -> ModelFacts:
        """The family, the training context, whether it is a vision model and its
        Modelfile's num_keep (NO_FACTS when not shown): one object per model shown, asked
        for every exchange."""
        return self._facts.get(local.digest or f"name:{key}", NO_FACTS)

    def runner_key(self, digest: str | None) -> str | None:
        """A digest's runner key: names on one weights' blob (its /api/show `modelfile` FROM)
        share Ollama's runner, keyed by the group's smallest digest; others keep theirs."""
        blob = facts[3] if (facts := self._train.get(digest or "")) else None
        return min(k for k, f in self._train.items() if f[3] == blob) if blob else digest

    async def update(
        self, tags: dict[str, LocalModel], show: Callable[[str], Awaitable[Shown | None]]
    ) -> None:
        """Show the models new in `tags` (the last /api/tags), set their `model_info`, and
        forget the models no longer listed."""
        for key, local in tags.items():
            cache_key = local.digest or f"name:{key}"
            details = self._shown.get(cache_key)
            if details is None:
                if self._retry.get(cache_key, 0.0) > time.monotonic():
                    continue
                shown = await show(local.name)
                if shown is None:
                    self._retry[cache_key] = time.monotonic() + SHOW_RETRY
                    continue
                details, self._train[cache_key] = shown
                self._shown[cache_key] = details
                train, vision, keep, _, params, hidden = shown[1]
                self._facts[cache_key] = ModelFacts(details[0], train, vision, keep, params, hidden)
            self._set_info(key, (local.label, *details))
        for key in self._info.keys() - tags.keys():
            self.model_info.remove(*self._info.pop(key))
        current = {t.digest or f"name:{k}" for k, t in tags.items()}
        self._shown = {k: v for k, v in self._shown.items() if k in current}
        self._train = {k: v for k, v in self._train.items() if k in current}
        self._facts = {k: v for k, v in self._facts.items() if k in current}
        self._retry = {k: v for k, v in self._retry.items() if k in current}

    def _set_info(self, key: str, labels: tuple[str, str, str, str]) -> None:
        previous = self._info.get(key)
        if previous == labels:
            return
        if previous is not None:
            self.model_info.remove(*previous)
        self.model_info.labels(*labels).set(1)
        self._info[key] = labels

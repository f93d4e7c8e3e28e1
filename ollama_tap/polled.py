"""What one box's poller last read, as the per-exchange code asks it (compiled: the poller
itself is async and aiohttp's, and runs interpreted)."""

from __future__ import annotations

from collections.abc import Callable

from ollama_tap.boxes.shown import ShownModels
from ollama_tap.facts import NO_FACTS, Standing
from ollama_tap.ollama.names import valid_key
from ollama_tap.ollama.state import LoadedModel, LocalModel

Poke = Callable[[Callable[[], None] | None], None]
"""`UpstreamPoller.poke_ps`: read /api/ps soon, then call the callable given (if any)."""


class Polled:
    """The state `UpstreamPoller` keeps, which it writes when a read lands and nothing else
    writes: the last /api/tags and /api/ps, the /api/show facts and the version. The load
    tracker and the truncation rules ask it once or twice per exchange, so it answers in
    compiled code; the poller's own methods of the same names delegate here."""

    def __init__(self, shown: ShownModels, poke_ps: Poke) -> None:
        self.tags: dict[str, LocalModel] = {}
        """The last /api/tags, by model key."""
        self.ps: dict[str, LoadedModel] | None = None
        """The last /api/ps, by model key; None before the first read and while Ollama is
        down."""
        self.version: str | None = None
        """Ollama's version per the last /api/version read (None before the first)."""
        self.shown = shown
        """What /api/show said of each listed model."""
        self._poke = poke_ps

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        """The poller's `poke_ps` (the load tracker asks after a load)."""
        self._poke(then)

    def loaded(self, model: str | None) -> LoadedModel | None:
        """The /api/ps entry of a name, or of another name for the same model: Ollama keys
        runners by blob, so `llama3.2:3b` runs in the runner /api/ps lists as
        `llama3.2:latest` when both name one digest."""
        valid = valid_key(model) if isinstance(model, str) else None
        if valid is None or self.ps is None:
            return None
        entry = self.ps.get(valid[0])
        local = self.tags.get(valid[0])
        if entry is None and local is not None and local.digest:
            for e in self.ps.values():
                if e.digest == local.digest:
                    return e
        return entry

    def digest_of(self, model: str | None) -> str | None:
        """The digest of the model a name stands for now (per /api/tags, else /api/ps)."""
        valid = valid_key(model) if isinstance(model, str) else None
        if valid is None:
            return None
        local = self.tags.get(valid[0])
        if local is not None and local.digest:
            return local.digest
        entry = self.loaded(model)
        return entry.digest if entry is not None and entry.digest else None

    def standing(self, model: str | None) -> Standing:
        """What is known of a model beyond /api/ps, in one lookup: its digest (as
        `digest_of`), its /api/show facts and the version (asked once per exchange:
        Exchange.standing)."""
        valid = valid_key(model) if isinstance(model, str) else None
        local = self.tags.get(valid[0]) if valid is not None else None
        if valid is None or local is None:
            return Standing(self.digest_of(model), NO_FACTS, self.version)
        digest = local.digest or self.digest_of(model)
        return Standing(digest, self.shown.facts(valid[0], local), self.version)

    def runner_key(self, digest: str | None) -> str | None:
        """A digest's runner key (ShownModels.runner_key)."""
        return self.shown.runner_key(digest)

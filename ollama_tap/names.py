"""The bounded set of `model` label values, under Ollama's name rules (ollama/names.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.ollama.names import canonical_model, model_key, valid_key
from ollama_tap.ollama.routes import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.slots import IDLE_RELEASE, LabelSlots

OTHER: Final = "other"
"""The label of every name beyond the cap (and of names Ollama would refuse)."""
NO_MODEL: Final = ""
"""The label of requests that name no model."""


def recordable(name: str | None) -> str | None:
    """The name as typed, fit to keep: canonical when Ollama would accept it, else `other` —
    a prompt pasted into `model` must not land in a metadata-mode record, which promises no
    text."""
    if not name:
        return None
    valid = valid_key(name)
    return OTHER if valid is None else valid[1]


SERVING_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS | {"/api/show"}
"""Routes whose success means Ollama has the model the request names: it resolves the name
before it answers, with 404 (or 400) when it cannot. Not pull, push or create, which answer
200 and report a failure inside the stream."""


class ModelLabels:
    """The bounded set of `model` label values (a `LabelSlots` under Ollama's name rules).

    A name gets a label of its own — and the spelling log lines print — only when Ollama
    vouches for it: the latest /api/tags or /api/ps the poller read lists it (`set_known`,
    not capped: Ollama's own list bounds it), or Ollama answered a request naming it on a
    `SERVING_ENDPOINTS` route with a 2xx status (`response_headers`, for at most `cap`
    names Ollama does not list). Until then, and for every name Ollama answers 404 or 400
    to, the label is `other`: typos and random names never take a slot. The exchange that
    proves a name is decided at its reply head, so all of its own series (in flight, token
    gaps, latencies) carry the name; only a request still waiting for its head counts as
    `other` meanwhile. A name that leaves both lists (a deleted model) keeps its slot until
    it has been neither listed nor proven for a day (`LabelSlots`).

    Every unproven name asks for an /api/tags refresh through the poller's callback, at
    most once per `refresh_interval` seconds (the callback schedules the read and returns),
    so a model pulled a moment ago is soon listed. Names Ollama would refuse are `other` at
    once; requests without a model get "". Matching is case-insensitive and prints the
    listed spelling, as Ollama does; `/v1` ids (`llama3.2:latest`) and native names
    (`llama3.2`) are one name. Records keep more (`spelling`).
    """

    name = "model-labels"
    phase = Phase.NAMES

    def __init__(
        self,
        cap: int,
        *,
        refresh_interval: float = 5.0,
        idle: float = IDLE_RELEASE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = LabelSlots(cap, idle=idle, clock=clock)
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._refresh: Callable[[], None] | None = None
        self._last_refresh = float("-inf")

    def set_refresher(self, refresh: Callable[[], None]) -> None:
        """Install the callback that schedules an /api/tags read (it must not block)."""
        self._refresh = refresh

    def set_known(self, source: str, names: Iterable[str]) -> None:
        """Replace the names one source ("tags", "ps") reports; the known set is their union."""
        self.slots.list_names(source, {model_key(n): canonical_model(n) for n in names})

    def on_free(self, listener: Callable[[str], None]) -> None:
        """Call `listener(label)` when a label value stops being used (its series can go)."""
        self.slots.on_free(listener)

    def label(self, name: object) -> str:
        """The label value for a request's `model` field (any JSON value)."""
        if not isinstance(name, str) or not name:
            return NO_MODEL
        valid = valid_key(name)
        if valid is None:
            return OTHER
        held = self.slots.get(valid[0])
        if held is not None:
            return held
        self._ask_refresh()
        return OTHER

    def spelling(self, name: str | None) -> str | None:
        """The name as records keep it: the label's spelling when it has a slot, else
        `recordable` (the canonical name as typed), so nothing is lost to `other`."""
        valid = valid_key(name) if name else None
        held = self.slots.get(valid[0]) if valid is not None else None
        return held or recordable(name)

    def response_headers(self, ex: Exchange) -> None:
        """The observer hook: a success on a serving route proves the name it named."""
        status, model = ex.status, ex.model
        if status is None or not 200 <= status < 300 or not model:
            return
        if ex.endpoint in SERVING_ENDPOINTS and (valid := valid_key(model)) is not None:
            self.slots.prove(*valid)

    def _ask_refresh(self) -> None:
        now = self._clock()
        if self._refresh is None or now - self._last_refresh < self.refresh_interval:
            return
        self._last_refresh = now
        self._refresh()

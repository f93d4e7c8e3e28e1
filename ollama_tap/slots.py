"""Bounded label values: a name gets a series of its own only once the upstream vouches for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

IDLE_RELEASE: Final = 86400.0
"""Seconds a name no source lists may go unproven before its slot is freed (a day)."""


class LabelSlots:
    """The names that hold a label value of their own, bounded.

        A name holds a *slot* while a source lists it (`list_names`: for models, Ollama's
        /api/tags and /api/ps) — listed names are not capped, the source's own list bounds
        them — or once it has been *proven* (`prove`: the upstream served a request naming it
        with a success status), for at most `cap` unlisted names at a time. Every other name
        holds none, and the caller gives it its catch-all value (`other`): names the upstream
        refuses, typos and random names never take a slot, however many there are.

        A name that stops being listed (a deleted model) keeps its slot; once no source has
        listed it and nothing has proven it for `idle` seconds, the slot is freed (`sweep`, run
        at each `list_names`), and the listeners added with `on_free` hear its spelling, so
        that they drop its series. A proof later gives it a slot again. A name proven before it
    was listed takes the listed spelling then, and its old spelling is freed the same way.

        Keys are the caller's matching form (for models, `model_key`); a slot prints with the
        listed spelling when there is one, else with the spelling of its first proof. The same
        rule serves any label a client can make up (model names, client names): only `cap`
        and what counts as listed and as proof differ.
    """

    def __init__(
        self, cap: int, *, idle: float = IDLE_RELEASE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cap = cap
        self.idle = idle
        self._clock = clock
        self._sources: dict[str, dict[str, str]] = {}
        self._listed: dict[str, str] = {}
        """Key → spelling of every name some source lists now."""
        self._held: dict[str, tuple[str, float]] = {}
        """Key → (spelling, last listed or proven) of the unlisted names holding a slot."""
        self._listeners: list[Callable[[str], None]] = []

    def get(self, key: str) -> str | None:
        """The spelling of the name's slot, or None when it holds none."""
        listed = self._listed.get(key)
        if listed is not None:
            return listed
        held = self._held.get(key)
        return None if held is None else held[0]

    def is_listed(self, key: str) -> bool:
        return key in self._listed

    def unlisted(self) -> int:
        """How many slots are held by names no source lists (those the cap bounds)."""
        return len(self._held)

    def list_names(self, source: str, names: Mapping[str, str]) -> None:
        """Replace what one source lists (key → spelling); the listed set is the union of
        all sources. Names that left it keep their slot, from now on unlisted."""
        now = self._clock()
        self._sources[source] = dict(names)
        before = self._listed
        self._listed = {k: v for listed in self._sources.values() for k, v in listed.items()}
        for key in self._listed.keys() & self._held.keys():
            spelling = self._held.pop(key)[0]
            if spelling != self._listed[key]:
                self._freed(spelling)  # proven as typed, listed as Ollama spells it
        for key in before.keys() - self._listed.keys():
            self._held[key] = (before[key], now)
        self.sweep()

    def prove(self, key: str, spelling: str) -> str | None:
        """The upstream served a request naming `key`: its slot's spelling, taking a free
        slot when it held none; None when every unlisted slot is taken."""
        listed = self._listed.get(key)
        if listed is not None:
            return listed
        held = self._held.get(key)
        if held is None and len(self._held) >= self.cap:
            return None
        spelling = spelling if held is None else held[0]
        self._held[key] = (spelling, self._clock())
        return spelling

    def sweep(self) -> None:
        """Free the slots of unlisted names idle for `idle` seconds, telling the listeners."""
        cutoff = self._clock() - self.idle
        idle = [key for key, (_, seen) in self._held.items() if seen <= cutoff]
        for key in idle:
            self._freed(self._held.pop(key)[0])

    def on_free(self, listener: Callable[[str], None]) -> None:
        """Call `listener(spelling)` whenever a spelling stops labelling anything: a slot
        `sweep` freed, or a proven spelling replaced by the listed one (it must not block)."""
        self._listeners.append(listener)

    def _freed(self, spelling: str) -> None:
        for listener in self._listeners:
            listener(spelling)

"""The exchanges in flight now, who is waiting, and how long each client kept the box busy."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.names import OTHER
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.ollama.names import canonical_model

NAME: Final = "inflight"
TRACKED: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""The routes that occupy a model (the others never wait for a slot)."""
RATE_WINDOW: Final = 1.0
"""Seconds over which an entry's live output rate is measured (at least)."""

Key = tuple[str, str]
"""(client, model) labels."""
SHOWN_MODEL: Final = 200
"""Characters of a model name the view shows: the name a client sent, not yet checked."""


class Entry:
    """One tracked exchange and what a snapshot needs that the Exchange does not hold."""

    __slots__ = ("ex", "key", "mark_at", "mark_events", "rate")

    def __init__(self, ex: Exchange, key: Key, now: float) -> None:
        self.ex = ex
        self.key = key
        self.mark_at = now
        self.mark_events = 0
        self.rate: float | None = None

    def live_rate(self, now: float) -> float | None:
        """Output pieces per second over the last RATE_WINDOW or more (None before any)."""
        ex = self.ex
        if now - self.mark_at >= RATE_WINDOW:
            if ex.first_output is not None:
                since = max(self.mark_at, ex.first_output)
                self.rate = (ex.output_events - self.mark_events) / max(now - since, 1e-9)
            self.mark_at, self.mark_events = now, ex.output_events
        return self.rate if self.rate is not None else ex.output_rate


class InFlight:
    """The observer that keeps every exchange on a model-occupying route from its `request`
    hook to its end, for `/_tap/api/inflight`, `ollama-tap top` and three metric families.

    Nothing is done per token: whether an exchange is still *waiting* (no output piece
    relayed yet: a stream before its first chunk, a single reply before its reply) is read
    from the Exchange when a snapshot or a scrape asks. Ollama sends a stream's head with its
    first chunk, so waiting covers the queue, the load and the prefill alike; the proxy
    cannot tell them apart before the final object.

    Busy time is kept per (client, model) label pair: the seconds during which at least one
    exchange of that pair was in flight, so `rate(busy)` per client over the sum is each
    app's share of the box.

    The labels bound the metric series only: `snapshot` shows each exchange's client name
    and the model name its request gave (a waiting request's model is shown before Ollama
    has answered for that name once, when its label is still `other`).
    """

    name = NAME
    phase = Phase.ANALYSIS

    def __init__(
        self, model_label: Callable[[object], str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.model_label = model_label
        self.clock = clock
        self.entries: dict[str, Entry] = {}
        self._busy: dict[Key, list[float]] = {}
        """Key → [exchanges in flight, since when the pair is busy, seconds before that]."""
        self.changes = 0
        """Bumped at every arrival and end: watchers push when it moved."""

    # -- the hooks ----------------------------------------------------------------------

    def request(self, ex: Exchange) -> None:
        if ex.endpoint not in TRACKED:
            return
        now = self.clock()
        key = (ex.client_label, self.model_label(ex.model))
        self.entries[ex.id] = Entry(ex, key, now)
        self._enter(key, now)
        self.changes += 1

    def response_headers(self, ex: Exchange) -> None:
        # The reply head may have proven the model's name (ModelLabels): move the pair.
        entry = self.entries.get(ex.id)
        if entry is None:
            return
        key = (entry.key[0], self.model_label(ex.model))
        if key != entry.key:
            now = self.clock()
            self._leave(entry.key, now)
            self._enter(key, now)
            entry.key = key

    def response(self, ex: Exchange) -> None:
        self._end(ex)

    def error(self, ex: Exchange) -> None:
        self._end(ex)

    def _end(self, ex: Exchange) -> None:
        entry = self.entries.pop(ex.id, None)
        if entry is not None:
            self._leave(entry.key, self.clock())
            self.changes += 1

    # -- busy time ----------------------------------------------------------------------

    def _enter(self, key: Key, now: float) -> None:
        busy = self._busy.get(key)
        if busy is None:
            busy = self._busy[key] = [0.0, now, 0.0]
        if not busy[0]:
            busy[1] = now
        busy[0] += 1

    def _leave(self, key: Key, now: float) -> None:
        busy = self._busy[key]
        busy[0] -= 1
        if not busy[0]:
            busy[2] += now - busy[1]

    def busy_seconds(self) -> dict[Key, float]:
        """Seconds each (client, model) pair has been busy, up to now."""
        now = self.clock()
        return {
            key: total + (now - since if count else 0.0)
            for key, (count, since, total) in self._busy.items()
        }

    def forget(self, label: str, value: str) -> None:
        """Drop the busy time of pairs whose client (label "client") or model is `value`
        (its label slot was freed), unless an exchange of the pair is in flight."""
        at = 0 if label == "client" else 1
        for key in [k for k, b in self._busy.items() if k[at] == value and not b[0]]:
            del self._busy[key]

    def models(self) -> set[str]:
        """Model labels that have been busy (the waiting gauges' series, zeros included)."""
        return {model for _, model in self._busy}

    # -- who is waiting -----------------------------------------------------------------

    def waiting(self) -> dict[str, list[Entry]]:
        """Waiting entries by model label, oldest first."""
        out: dict[str, list[Entry]] = {}
        for entry in self.entries.values():
            if entry.ex.first_output is None:
                out.setdefault(entry.key[1], []).append(entry)
        for entries in out.values():
            entries.sort(key=_started)
        return out

    def snapshot(self) -> dict[str, Any]:
        """Every exchange in flight, oldest first, as `/_tap/api/inflight` answers; a
        waiting one's position counts the waiting exchanges of its model before it, from 1.
        One pass: with 2,000 streams in flight this is the whole cost of an answer. With
        several boxes each row names its `box`, and positions count per box.
        Positions are counted per model name as requested, so a name only one client
        has asked for yet is not queued behind every other unproven one."""
        now = self.clock()
        positions: dict[str, int] = {}
        queues: dict[tuple[str, str], int] = {}
        rows: list[dict[str, Any]] = []
        for entry in sorted(self.entries.values(), key=_started):
            ex = entry.ex
            model = self._shown_model(ex.model, entry.key[1])
            position: int | None = None
            if ex.first_output is None:  # each box queues its own: positions count per box
                positions[model] = positions.get(model, 0) + 1
                position = queues[ex.box, model] = queues.get((ex.box, model), 0) + 1
            rate = entry.live_rate(now)
            rows.append(
                {
                    "id": ex.id,
                    "client": ex.client_name,
                    "model": model,
                    "endpoint": ex.endpoint,
                    "phase": "streaming" if position is None else "waiting",
                    "elapsed": round(now - ex.started, 3),
                    "outputs": ex.output_events,
                    "rate": None if rate is None else round(rate, 2),
                    "position": position,
                    "box": ex.box if ex.route is not None else None,
                }
            )
        return {"at": time.time(), "in_flight": len(rows), "waiting": positions, "exchanges": rows}

    @staticmethod
    def _shown_model(name: str | None, label: str) -> str:
        """The model's label once Ollama has vouched for the name (the spelling /metrics
        uses), else the name as requested, completed as /api/tags would print it."""
        if label and label != OTHER:
            return label
        return canonical_model(name)[:SHOWN_MODEL] if name else ""


def _started(entry: Entry) -> float:
    return entry.ex.started

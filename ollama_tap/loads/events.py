"""A load event: one model load the proxy saw, who triggered it, why, and what it cost."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

from ollama_tap.ollama.options import Change


class Cause(enum.StrEnum):
    """Why a model was (re)loaded; docs/diagnoses.md ("Loads") names the rule behind each."""

    FIRST_LOAD = "first_load"
    """The proxy had never seen the model resident (since it started)."""
    EXPIRED = "expired"
    """L1: its keep_alive ran out while it was idle."""
    OPTIONS_CHANGED = "options_changed"
    """L2: it was resident, and this request's runner options differ from the loader's."""
    EVICTED = "evicted"
    """L3: it left /api/ps unexpired while another model loaded."""
    UNLOADED = "unloaded"
    """L4: a request with keep_alive 0 (or an unload call) unloaded it."""
    OOM_FLUSH = "oom_flush"
    """L5: a reply reported running out of memory, and Ollama expired every runner."""
    RUNNER_DIED = "runner_died"
    """L6: its last reply said the runner stopped; Ollama starts a new one."""
    RESTART = "restart"
    """L7: Ollama stopped answering, and the model was gone when it came back."""
    UNKNOWN = "unknown"
    """A load none of the rules explains."""


_ids = itertools.count(1)


@dataclass(slots=True)
class Departure:
    """Why a model stopped being resident, kept until it loads again."""

    cause: Cause
    by: str | None = None
    """The model whose load evicted it."""
    by_request: str | None = None
    """The request that unloaded it."""
    client: str | None = None
    """The name of that request's client."""


@dataclass(slots=True)
class LoadEvent:
    """One load: `request`/`client` are the earliest overlapping request (None when no
    request through the proxy overlapped it); `waited` the others that sat behind it.

    `client` is the app's name (Exchange.client_name: its header, a `--client` rule, its
    User-Agent), which says who to talk to when every app runs on one box; `address` is the
    peer address, which full records alone keep.
    """

    model: str
    cause: Cause
    at: float
    """Unix seconds: when the triggering request arrived (or the load was noticed)."""
    started: float
    """The same on the monotonic clock: the start of the load window."""
    request: str | None = None
    client: str | None = None
    address: str | None = None
    endpoint: str | None = None
    changes: list[Change] = field(default_factory=list)
    departure: Departure | None = None
    predicted: bool = False
    load_duration: float | None = None
    """Seconds, from the trigger's reply (`load_duration`); None when it carried none."""
    waited: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    context_length: int | None = None
    reduced_from: int | None = None
    """The automatic context the model had before, when this load's came out smaller (the
    load's cause is still what triggered it; `ollama_tap_context_reduced_total` counts it)."""
    noticed: float = 0.0
    """Monotonic time the load was over (reply) or seen (ps): the end of its window."""
    source: str = "reply"
    """"reply" (a load_duration over the threshold) or "ps" (a model new in /api/ps)."""
    box: str = ""
    """The box it loaded on (its --upstream NAME), "" with one plain upstream."""
    id: str = field(default_factory=lambda: f"load-{next(_ids)}")

    @property
    def detail(self) -> str:
        """One line: the diff, the evicting model, or the unloading request; then a reduced
        automatic context."""
        return self.describe(with_client=True)

    def describe(self, *, with_client: bool) -> str:
        """`detail`, the unloading request's client address left out unless `with_client`."""
        reduced = ""
        if self.reduced_from is not None:
            reduced = (
                f"context reduced {self.reduced_from} → {self.context_length} (did not fit memory)"
            )
        text = self._cause_detail(with_client=with_client)
        return f"{text}; {reduced}" if text and reduced else text or reduced

    def _cause_detail(self, *, with_client: bool) -> str:
        if self.changes:
            return ", ".join(c.text for c in self.changes)
        d = self.departure
        if d is not None and d.by is not None:
            return f"evicted by {d.by}" + (f" on {self.box}" if self.box else "")
        if d is not None and d.by_request is not None:
            who = f" from {d.client}" if d.client and with_client else ""
            return f"unloaded by request {d.by_request}{who}"
        return ""

    def window_end(self, slack: float) -> float:
        """Monotonic end of the load window (a request starting before it shared the load)."""
        return max(self.started + (self.load_duration or 0.0), self.noticed) + slack

    def as_json(self, *, with_client: bool = True) -> dict[str, Any]:
        d = self.departure
        return {
            "id": self.id,
            "at": self.at,
            "model": self.model,
            "cause": str(self.cause),
            "detail": self.describe(with_client=with_client),
            "changes": [c.as_json() for c in self.changes],
            "by": d.by if d else None,
            "by_request": d.by_request if d else None,
            "request": self.request,
            "client": self.client,
            "address": self.address if with_client else None,
            "endpoint": self.endpoint,
            "predicted": self.predicted,
            "load_duration": self.load_duration,
            "waited": list(self.waited),
            "evicted": list(self.evicted),
            "context_length": self.context_length,
            "reduced_from": self.reduced_from,
            "source": self.source,
            "box": self.box or None,
        }

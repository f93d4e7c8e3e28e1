"""What the load tracker keeps per runner and per request in flight, and the rules that
turn it into a cause (research §10.B)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ollama_tap.loads.events import Cause, Departure, LoadEvent
from ollama_tap.loads.options import Change
from ollama_tap.ollama.state import LoadedModel

SLACK: Final = 0.5
"""Seconds of clock and poll skew allowed when comparing `expires_at` and load windows."""
OOM_WINDOW: Final = 60.0
"""Seconds after an out-of-memory error during which runners leaving /api/ps are its flush
(L5: they go as they become idle)."""
UNLOADING: Final = 10.0
"""Seconds after a keep_alive 0 request during which /api/ps may still list the runner
while it unloads (and VRAM recovers) without that being a new load."""
OOM_TEXTS: Final = (
    "out of memory", "cudamalloc failed", "failed to allocate", "allocation failed",
    "not enough memory", "insufficient memory", "unable to allocate",
)  # fmt: skip
"""`llm/status.go` substrings that make Ollama expire every runner (L5)."""
DIED_TEXTS: Final = (
    "model runner has unexpectedly stopped",
    "an error was encountered while running the model",
)
"""Errors after which the next request finds a dead runner and reloads (L6)."""


@dataclass(slots=True)
class Pending:
    """A request in flight, as the tracker saw the runner when it arrived."""

    id: str
    key: str
    model: str
    client: str
    endpoint: str
    started: float
    wall: float
    opts: dict[str, Any]
    resident: bool
    """The runner was resident (and not idle past its expiry) when the request arrived."""
    changes: list[Change] = field(default_factory=list)
    """The predicted reload's fields (L2 applied before forwarding)."""
    behind: bool = False
    """It arrived while its runner was away with requests in flight (a load under way)."""
    client_name: str = ""
    expiring: bool = False
    """Its runner was idle with an `expires_at` within SLACK of its arrival: too close to call
    it gone (it may still be reused), but if it loads, its keep_alive ran out (L1)."""
    """The app's name (X-Ollama-Tap-Client or a --client rule), "" when it has none."""


@dataclass(slots=True)
class Runner:
    """One scheduler key (a model digest, or a name when no digest is known)."""

    name: str
    resident: bool = False
    seen: bool = False
    """Resident at some point since the proxy started."""
    row: LoadedModel | None = None
    """Its last /api/ps row (None until a read after its load)."""
    opts: dict[str, Any] | None = None
    """The runner options of the request that loaded it; None when the proxy did not see it."""
    auto_ctx: int | None = None
    """The context /api/ps showed after a load by a request that left num_ctx unset."""
    departure: Departure | None = None
    current: LoadEvent | None = None
    fresh: LoadEvent | None = None
    """A load a reply showed that no /api/ps read has listed yet."""
    failed: bool = False
    victims: list[str] = field(default_factory=list)
    """Models evicted to make room for a load of this one still under way."""
    unloading_until: float = 0.0
    flight: dict[str, Pending] = field(default_factory=dict)

    def expired_idle(self, now: float) -> bool:
        """Idle with an `expires_at` in the past: gone by keep_alive (L1), listed or not."""
        row = self.row
        return (
            not self.flight
            and row is not None
            and row.expires_at is not None
            and row.expires_at < now - SLACK
        )

    def earliest(self) -> Pending | None:
        """The request in flight that arrived first: the loader, when a load shows (L0)."""
        return min(self.flight.values(), key=lambda p: p.started, default=None)


def cause_of(runner: Runner, p: Pending | None) -> tuple[Cause, Departure | None]:
    """Why a load happened, from the runner as `p` found it and its departure since."""
    if p is not None and p.resident:
        if p.changes:
            return Cause.OPTIONS_CHANGED, None
        if p.expiring:
            return Cause.EXPIRED, Departure(Cause.EXPIRED)
        return (Cause.RUNNER_DIED if runner.failed else Cause.UNKNOWN), None
    dep = runner.departure
    if dep is not None:
        return dep.cause, dep
    if not runner.seen:
        return Cause.FIRST_LOAD, None
    return (Cause.RUNNER_DIED if runner.failed else Cause.UNKNOWN), None


def why_gone(
    runner: Runner, now: float, mono: float, loader: str | None, oom_at: float
) -> Departure:
    """Why a runner left /api/ps: L5 flush, L1 expiry, L3 eviction by `loader`, L6 death."""
    if mono - oom_at < OOM_WINDOW:
        return Departure(Cause.OOM_FLUSH)
    row = runner.row
    if row is not None and row.expires_at is not None and row.expires_at <= now + SLACK:
        return Departure(Cause.EXPIRED)
    if loader is not None:
        return Departure(Cause.EVICTED, by=loader)
    return Departure(Cause.RUNNER_DIED if runner.failed else Cause.UNKNOWN)


def matches(texts: tuple[str, ...], message: str | None) -> bool:
    if not message:
        return False
    low = message.lower()
    return any(t in low for t in texts)

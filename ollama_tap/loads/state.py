"""What the load tracker keeps per runner and per request in flight, and the rules that
turn it into a cause (docs/diagnoses.md, "Loads")."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

from ollama_tap.loads.events import Cause, Departure, LoadEvent
from ollama_tap.ollama.options import Change, reload_changes
from ollama_tap.ollama.state import LoadedModel
from ollama_tap.ollama.version import LLAMA_SERVER, Version

SLACK: Final = 0.5
"""Seconds of clock and poll skew allowed when comparing `expires_at` and load windows."""
OOM_WINDOW: Final = 60.0
"""Seconds after an out-of-memory error during which runners leaving /api/ps are its flush
(L5: they go as they become idle)."""
UNLOADING: Final = 10.0
"""Seconds after a keep_alive 0 request during which /api/ps may still list the runner
while it unloads (and VRAM recovers) without that being a new load."""
OOM_TEXTS: Final = (
    "out of memory", "out of device memory", "cudamalloc failed", "hipmalloc failed",
    "failed to allocate", "allocation failed", "not enough memory", "insufficient memory",
    "vk_error_out_of_device_memory", "erroroutofmemory",
)  # fmt: skip
"""`llm/status.go` `outOfMemorySubstrings` (fb30760), lower-cased as `IsOutOfMemoryMessage`
compares them: an error matching one makes Ollama expire every runner (L5,
`expireRunnersForRuntimeOOM`, v0.30.0+)."""
DIED_TEXTS: Final = (
    "model runner has unexpectedly stopped",
    "an error was encountered while running the model",
)
"""Errors after which the next request finds a dead runner and reloads (L6)."""
AUTO_RETRIES: Final = (32768, 4096)
"""The only contexts an automatic one is retried with when its load does not fit
(`nextLowerAutoNumCtx`, server/sched.go at v0.30.0)."""
ENDED_KEPT: Final = 64
"""Requests kept per runner between two /api/ps reads (`Runner.ended`)."""


class Fit(IntEnum):
    """How well a load for some runner options explains an /api/ps row (`may_show`)."""

    NO = 0
    MAYBE = 1
    """Unset num_ctx while the automatic context is unknown, or a smaller retry of it."""
    SURE = 2


class Pending:
    """A request in flight, as the tracker saw the runner when it arrived. One per tracked
    exchange: a plain class, as its `__init__` compiles (a dataclass's is generated at
    import and runs interpreted, some 5,000 instructions an exchange)."""

    __slots__ = (
        "address", "behind", "changes", "client", "endpoint", "expiring", "id", "key",
        "manifest", "model", "opts", "resident", "started", "wall",
    )  # fmt: skip

    def __init__(
        self, id: str, key: str, model: str, client: str, address: str, endpoint: str,
        started: float, wall: float, opts: dict[str, Any], resident: bool,
    ) -> None:  # fmt: skip
        self.id = id
        self.key = key
        self.model = model
        self.client = client
        """The client's name (Exchange.client_name), "" when no observer named it."""
        self.address = address
        self.endpoint = endpoint
        self.started = started
        self.wall = wall
        self.opts = opts
        self.resident = resident
        """The runner was resident (and not idle past its expiry) when the request arrived."""
        self.changes: list[Change] = []
        """The predicted reload's fields (L2 applied before forwarding)."""
        self.behind = False
        """It arrived while its runner was away with requests in flight (a load under way)."""
        self.manifest: str | None = None
        """What its model brings to a runner beyond its options: the Modelfile's FROM,
        ADAPTER and DRAFT lines once /api/show told them (`ModelFacts.hidden`: a variant
        that only sets other PARAMETERs brings the same), else its manifest digest
        (/api/tags); None while unknown."""
        self.expiring = False
        """Its runner was idle with an `expires_at` within SLACK of its arrival: too close to
        call it gone (it may still be reused), but if it loads, its keep_alive ran out (L1)."""


@dataclass(frozen=True, slots=True)
class Outlook:
    """How a request's model stands on one box before it goes there (the router's input)."""

    key: str
    """The runner's key (LoadTracker._key)."""
    opts: dict[str, Any]
    """The runner options the request asks for."""
    resident: bool = False
    """Resident, and not idle past its expiry."""
    changes: list[Change] = field(default_factory=list)
    """The fields that would make Ollama reload it for this request (rule L2)."""
    last_load: float | None = None
    """Seconds its last load on this box took, when a reply said."""
    digest: str | None = None
    """The model's manifest digest on this box (None while unknown)."""

    @property
    def reloads(self) -> bool:
        """Resident, but this request's options would reload it."""
        return self.resident and any(c.certain for c in self.changes)


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
    manifest: str | None = None
    """What the model whose request loaded it brings beyond its options (`Pending.manifest`):
    a request that brings the same, with the same options, runs on it."""
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
    row_idle: bool = False
    """No request of the proxy's was in flight when `row` was read."""
    row_at: float = 0.0
    """Unix seconds `row` was read."""
    last_end: float = 0.0
    """Unix seconds the last request in flight on it ended."""
    keep_alive_by: str | None = None
    """The request in flight or done that last carried keep_alive (it sets the runner's)."""
    ended: list[Pending] = field(default_factory=list)
    """Requests that ended since the last /api/ps read and may have loaded the runner (the
    first ENDED_KEPT): a load under a second shows in no reply, and the next read may list
    the runner one of them loaded."""
    unload_after: Departure | None = None
    """A keep_alive 0 that waits for the requests in flight (`processCompleted` unloads
    at refCount 0 only; a later request carrying keep_alive overwrites it)."""

    def idle_expiry(self) -> float | None:
        """The row's `expires_at`, when it is the runner's expiry: read while idle and after
        its last request ended. A busy runner keeps its last idle expiry, maybe past
        (`useLoadedRunner` stops the timer and leaves `expiresAt`), and the end of a
        request sets a new one (`processCompleted`), so any other row's is stale."""
        row = self.row
        if row is None or not self.row_idle or self.row_at < self.last_end:
            return None
        return row.expires_at

    def relisted(self, row: LoadedModel) -> bool:
        """Listed with another `context_length` than its last row: a new runner no reply
        showed loading (L0; `needsReload` replaced it)."""
        return self.row is not None and self.row.context_length != row.context_length

    def expired_idle(self, now: float) -> bool:
        """Idle with an `expires_at` in the past: gone by keep_alive (L1), listed or not."""
        expiry = self.idle_expiry()
        return not self.flight and expiry is not None and expiry < now - SLACK

    def loaders(self, row: LoadedModel, retries: bool) -> list[Pending]:
        """The requests, in flight or ended since the last read, that a load listed as
        `row` is surely for (or, when none is, maybe for), the first to arrive first (L0:
        its trigger, the others waited for it). A reload no reply showed (under a second)
        may list the runner another request asked for while these wait."""
        fits = [
            (may_show(p.opts, self.auto_ctx, row, retries), p)
            for p in [*self.flight.values(), *self.ended]
        ]
        best = max((fit for fit, _ in fits), default=Fit.NO)
        return sorted((p for fit, p in fits if fit is best > Fit.NO), key=lambda p: p.started)

    def explains(self, row: LoadedModel, retries: bool) -> bool:
        """Whether the options of the request that loaded the runner explain `row` as well
        as those of any request that ended since the last read (a reload no reply showed)."""
        fit = may_show(self.opts, self.auto_ctx, row, retries)
        if fit is Fit.SURE:
            return True
        later = (may_show(p.opts, self.auto_ctx, row, retries) for p in self.ended)
        return fit is Fit.MAYBE and Fit.SURE not in later

    def end(self, p: Pending) -> None:
        """`p` ended: kept until the next read when it may have loaded the runner (the
        proxy foresaw a load, or it set a num_ctx that a read can tell apart)."""
        may_load = not p.resident or p.changes or p.expiring or "num_ctx" in p.opts
        if may_load and len(self.ended) < ENDED_KEPT:
            self.ended.append(p)


def may_show(
    opts: dict[str, Any] | None, auto_ctx: int | None, row: LoadedModel, retries: bool
) -> Fit:
    """Whether a load for these runner options (None: unknown) can be listed as `row`. One
    that sets num_ctx shows it. One that leaves it unset shows the automatic context: the
    last one seen, or with `retries` (v0.30.0+) one of the smaller contexts a load that did
    not fit retries with, or more than a last one that was such a retry; any while no
    automatic context was seen."""
    ctx = row.context_length
    if ctx is None or opts is None:
        return Fit.MAYBE
    asked = opts.get("num_ctx")
    if asked is not None:
        return Fit.SURE if asked == ctx else Fit.NO
    if ctx == auto_ctx:
        return Fit.SURE
    if auto_ctx is None:
        return Fit.MAYBE
    if retries and (ctx in AUTO_RETRIES or (ctx > auto_ctx and auto_ctx in AUTO_RETRIES)):
        return Fit.MAYBE
    return Fit.NO


def row_stale(p: Pending, runner: Runner | None, retries: bool) -> bool:
    """Whether the last /api/ps row may describe another runner than the one that served
    `p`: not resident when it came, sent to change its options, or not read since. A
    request that leaves num_ctx unset (every /v1 one) runs with the automatic context
    (`needsReload` reloads an explicit runner that differs from it), so the row is its
    context only when an unset request loaded the runner, or the row shows the automatic
    context an earlier one got; a runner loaded out of sight is not trusted for it."""
    if not p.resident or p.changes or runner is None or runner.row is None:
        return True
    if may_show(p.opts, runner.auto_ctx, runner.row, retries) is Fit.NO:
        return True  # another request's reload, listed while this one ran
    if "num_ctx" in p.opts:
        return False
    auto = runner.opts is not None and "num_ctx" not in runner.opts
    return not auto and runner.row.context_length != runner.auto_ctx


def reduced_from(runner: Runner, row: LoadedModel) -> int | None:
    """The automatic context a runner had before, when a load by a request that left
    num_ctx unset came out smaller: from v0.30.0 a load that runs out of memory is retried
    with a smaller automatic context (32768, then 4096; `server/sched.go`), and a changed
    `OLLAMA_CONTEXT_LENGTH` or VRAM does the same across a restart. None otherwise."""
    before, now = runner.auto_ctx, row.context_length
    auto = runner.opts is not None and "num_ctx" not in runner.opts
    return before if auto and before is not None and now is not None and now < before else None


def reused(runner: Runner, p: Pending) -> bool:
    """Whether Ollama served `p` on the runner it found rather than loading one (L0 d), so
    that its `load_duration` over a second is no load: resident, not expiring nor failed,
    loaded by a request the proxy saw for the same weights, adapters and projectors (the
    same `manifest`), with runner options (the Modelfile's PARAMETERs among them) that `p`
    matches field for field, then and now. `needsReload` compares nothing else but the
    runner's health ping (server/sched.go:671-709 at v0.24.0). The reply's `load_duration`
    still runs from the handler's start (server/routes.go GenerateHandler: checkpointStart
    … checkpointLoaded), through `GetModel` and `Capabilities`, which opens the GGUF and
    reads its metadata (server/images.go:85-108; three times for an /api/generate): more
    than a second on a loaded machine, with no runner started."""
    if not p.resident or p.changes or p.expiring or runner.failed or runner.opts is None:
        return False
    if p.manifest is None or p.manifest != runner.manifest:
        return False
    ctx = runner.row.context_length if runner.row is not None else None
    return not reload_changes(runner.opts, ctx, p.opts, runner.auto_ctx)


def alike(a: Pending, b: Pending) -> bool:
    """Two requests that found their runner alike (resident or not, the same changes)."""
    return a.resident == b.resident and [c.text for c in a.changes] == [c.text for c in b.changes]


def set_trigger(event: LoadEvent, p: Pending) -> None:
    """Make `p` the request that triggered `event`."""
    event.request, event.endpoint = p.id, p.endpoint
    event.client, event.address = p.client or None, p.address
    event.at, event.started = p.wall, p.started


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
    expiry = runner.idle_expiry()
    if expiry is not None and expiry <= now + SLACK:
        return Departure(Cause.EXPIRED)
    if loader is not None:
        return Departure(Cause.EVICTED, by=loader)
    return Departure(Cause.RUNNER_DIED if runner.failed else Cause.UNKNOWN)


def flushes_on_oom(version: Version | None) -> bool:
    """Whether an out-of-memory error flushes every runner on this version: the runtime
    flush (`expireRunnersForRuntimeOOM`) arrived with the llama-server runners, v0.30.0."""
    return version is None or version >= LLAMA_SERVER


def matches(texts: tuple[str, ...], message: str | None) -> bool:
    if not message:
        return False
    low = message.lower()
    return any(t in low for t in texts)

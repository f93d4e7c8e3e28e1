"""Ollama's scheduler for the fake: resident runners, reloads, eviction, keep_alive expiry.

Off by default (`Engine.scheduler` is None: a run marks its model loaded, as before). A test
that needs the rules sets `fake.scheduler = Scheduler(fake, max_loaded=1)`. Each rule
cites ../shared/research/ollama-truncation-and-loads.md (fb30760 `server/sched.go`); a load
takes `load_seconds` of real time, which `load_duration` then reports. Expiry is applied
when it can be observed (an /api/ps read or a request), which no client can tell from a
timer. Embedding routes are not scheduled.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tests.support.fake_ollama.context import parse_version
from tests.support.fake_ollama.models import FakeModel, LoadedModel
from tests.support.fake_ollama.replies import Refused
from tests.support.fake_ollama.script import Run

if TYPE_CHECKING:
    from tests.support.fake_ollama.engine import Engine

FOREVER_NS = (1 << 63) - 1
_INT_FIELDS = ("num_batch", "num_gpu", "main_gpu", "num_thread", "draft_num_predict")
DEFAULT_BATCH = 512
"""`api.DefaultOptions` NumBatch: an unset request compares as 512 (`needsReload`)."""
AUTO_BATCH = 512
"""The batch the fake's `automaticGenerationBatch` chooses for a runner loaded with
num_batch unset (Ollama picks 256–2048 by memory; the fake's models all get 512)."""
AUTO_MMAP = True
"""The use_mmap the fake chooses for a runner loaded with it unset."""
OOM_TEXTS = (
    "out of memory", "out of device memory", "cudamalloc failed", "hipmalloc failed",
    "failed to allocate", "allocation failed", "not enough memory", "insufficient memory",
    "vk_error_out_of_device_memory", "erroroutofmemory",
)  # fmt: skip
"""`llm/status.go` `outOfMemorySubstrings` (fb30760), matched lower-cased."""
OOM_FLUSH = (0, 30, 0)
"""`expireRunnersForRuntimeOOM` arrived with the llama-server runners (F§1 #12), and so did
the retry of an automatic context that does not fit at load (F§5)."""
RETRY_CONTEXTS = (32768, 4096)
"""The smaller automatic contexts a load that ran out of memory retries with (v0.30.0+)."""
LOAD_OOM = "llama-server process has terminated: exit status 2: cudaMalloc failed: out of memory"
"""A load that does not fit (F§5 "Error shapes": `llama-server process has terminated`)."""


def train_context(model: FakeModel) -> int:
    arch = model.model_info.get("general.architecture", "")
    return int(model.model_info.get(f"{arch}.context_length", model.context_length or 1 << 20))


@dataclass
class RunnerOptions:
    """`api.Runner` plus the launch flag `shift`, as `needsReload` compares them (§7.2)."""

    num_ctx: int
    num_ctx_auto: bool
    ints: dict[str, int | None]
    use_mmap: bool | None
    shift: bool

    @classmethod
    def of(cls, run: Run) -> RunnerOptions:
        """DefaultOptions ← request options (§7.2; the fake has no Modelfile PARAMETERs).
        `num_ctx` < 4 is 4 (2048 for a vision model) and it is capped at the training
        context (`getRunner`, §7.1); unset, it is the model's automatic context
        (`Run.default_ctx`: the Modelfile's, else the server's)."""
        opts = run.options
        explicit = isinstance(opts.get("num_ctx"), int) and not isinstance(opts["num_ctx"], bool)
        floor = 2048 if "vision" in run.model.capabilities else 4  # getRunner (F§1 #9)
        num_ctx = max(int(opts["num_ctx"]), floor) if explicit else run.default_ctx
        ints = {f: opts[f] if isinstance(opts.get(f), int) else None for f in _INT_FIELDS}
        mmap = opts.get("use_mmap") if isinstance(opts.get("use_mmap"), bool) else None
        family = run.model.details.get("family", "")
        shift = run.shift if run.shift is not None else family != "deepseek2"
        return cls(min(num_ctx, train_context(run.model)), not explicit, ints, mmap, shift)


def needs_reload(runner: RunnerOptions, request: RunnerOptions) -> bool:
    """`needsReload` (sched.go:1381-1431): num_ctx unless both are auto; num_gpu only when
    the request sets it ≥ 0; num_batch with an unset request as 512 and an automatic
    runner as the batch it chose; a nil use_mmap matches a runner that chose it itself,
    not an explicit one (F§1 #10); the `shift` launch flag; everything else compared as
    is. keep_alive never reloads."""
    if runner.shift != request.shift:
        return True
    if not (runner.num_ctx_auto and request.num_ctx_auto) and runner.num_ctx != request.num_ctx:
        return True
    for name in _INT_FIELDS:
        old, new = runner.ints.get(name), request.ints.get(name)
        if name == "num_gpu":
            if new is None or new < 0:
                continue
            old = -1 if old is None else old
        if name in {"num_thread", "draft_num_predict"}:
            old, new = old or 0, new or 0
        if name == "num_batch":
            old = AUTO_BATCH if old is None else old
            new = DEFAULT_BATCH if new is None else new
        if old != new:
            return True
    if request.use_mmap is None:
        return runner.use_mmap is not None
    return (AUTO_MMAP if runner.use_mmap is None else runner.use_mmap) != request.use_mmap


@dataclass
class FakeRunner:
    """A loaded model: its options, `sessionDuration` (keep_alive) and references."""

    model: FakeModel
    options: RunnerOptions
    session: float
    refs: int = 0
    expires_at_ns: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class Scheduler:
    """The rules of §7: one pending load at a time, reuse, reload, evict, expire, unload."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_loaded: int = 3,
        load_seconds: float = 1.1,
        prepare_seconds: float = 0.0,
    ) -> None:
        self.engine = engine
        self.max_loaded = max_loaded
        """`OLLAMA_MAX_LOADED_MODELS` (default 3 × GPUs, §7.3)."""
        self.load_seconds = load_seconds
        self.prepare_seconds = prepare_seconds
        """The handler's time before it asks the scheduler, in `load_duration` whether or
        not a runner loads (server/routes.go GenerateHandler from checkpointStart: GetModel
        and `Capabilities` opening the GGUF, server/images.go:85-108, at v0.24.0): over a
        second on a loaded machine."""
        self.context_fits: int | None = None
        """The largest context any model's load fits in memory (None: all fit)."""
        self.runners: dict[str, FakeRunner] = {}
        self.loads: list[str] = []
        """Every load, in order (names): what a test checks the proxy against."""
        self._pending = asyncio.Lock()

    async def acquire(self, run: Run) -> None:
        """Give `run` a runner: the resident one when `needsReload` says no (the fast path,
        §7.1, never queued), else load one, evicting to make room (§7.3). Runners are keyed
        by the model's blob (`s.loaded[pending.model.ModelPath]`, every version), so names
        that share one (`ollama cp`, Modelfile variants) share a runner, which /api/ps
        lists under the name that loaded it (F§1 #16)."""
        await asyncio.sleep(self.prepare_seconds)
        self.sweep()
        wanted = RunnerOptions.of(run)
        runner = self.runners.get(run.model.blob)
        if runner is not None and not needs_reload(runner.options, wanted):
            self._use(runner, run)
            return
        async with self._pending:  # processPending: one pending request at a time (§7.1)
            runner = self.runners.get(run.model.blob)
            if runner is not None and needs_reload(runner.options, wanted):
                await self._unload(runner)
            elif runner is not None:
                self._use(runner, run)
                return
            while len(self.runners) >= self.max_loaded:
                await self._unload(self._victim())
            await asyncio.sleep(self.load_seconds)
            session = run.keep_alive if run.keep_alive_set else self.engine.default_keep_alive
            runner = FakeRunner(run.model, self._fit(wanted), session)
            self.runners[run.model.blob] = runner
            self.loads.append(run.model.name)
            self._use(runner, run)

    def _fit(self, wanted: RunnerOptions) -> RunnerOptions:
        """A context too large for memory: from v0.30.0 an automatic one is retried at
        32768, then 4096 (the load loop of `server/sched.go`), and /api/ps shows the one
        that fit; an explicit one, or any before v0.30.0, fails the load with a 500."""
        fits = self.context_fits
        if fits is None or wanted.num_ctx <= fits:
            return wanted
        if wanted.num_ctx_auto and parse_version(self.engine.version) >= OOM_FLUSH:
            for smaller in RETRY_CONTEXTS:
                if smaller < wanted.num_ctx and smaller <= fits:
                    return replace(wanted, num_ctx=smaller)
        raise Refused(500, LOAD_OOM)

    def release(self, run: Run) -> None:
        """A request ended (`processCompleted`, §7.4): at refCount 0, unload when the
        session is ≤ 0, else `expiresAt = now + sessionDuration`."""
        runner = self.runners.get(run.model.blob)
        if runner is None:
            return
        runner.refs -= 1
        if runner.refs > 0:
            return
        runner.idle.set()
        if runner.session <= 0:
            self._drop(runner)
        else:
            self._expire_in(runner, runner.session)

    def unload_now(self, model: FakeModel) -> None:
        """An empty prompt with keep_alive 0 (`expireRunner`, §7.4): expires now, goes when
        idle."""
        runner = self.runners.get(model.blob)
        if runner is None:
            return
        runner.session = 0
        if runner.refs == 0:
            self._drop(runner)

    def flush_oom(self) -> None:
        """`expireRunnersForRuntimeOOM` (v0.30.0+): an out-of-memory error from a runner
        expires every runner; idle ones unload now, busy ones when they go idle."""
        for runner in list(self.runners.values()):
            runner.session = 0
            if runner.refs == 0:
                self._drop(runner)

    def sweep(self) -> None:
        """keep_alive expiry (§7.4): idle runners past `expiresAt` unload."""
        now = time.time_ns()
        for runner in list(self.runners.values()):
            if runner.refs == 0 and runner.expires_at_ns <= now:
                self._drop(runner)

    def _victim(self) -> FakeRunner:
        """`findRunnerToUnload` (sched.go:1664-1693): by sessionDuration ascending, then blob
        path; the first idle one, else the first (and wait for it). Not LRU."""
        ordered = sorted(self.runners.values(), key=lambda r: (r.session, r.model.digest))
        return next((r for r in ordered if r.refs == 0), ordered[0])

    async def _unload(self, runner: FakeRunner) -> None:
        runner.session = 0
        while runner.refs > 0:
            runner.idle.clear()
            await runner.idle.wait()
        self._drop(runner)

    def _use(self, runner: FakeRunner, run: Run) -> None:
        """`useLoadedRunner`: a later request that carries keep_alive overwrites
        sessionDuration (§7.4); the expiry timer stops and `expiresAt` is left as it was,
        possibly past, until refCount 0 sets a new one (F§1 #6). A runner loading for its
        first request has none: /api/ps shows a moving now + sessionDuration
        (`loadedModels`)."""
        if run.keep_alive_set:
            runner.session = run.keep_alive
        runner.refs += 1
        runner.idle.clear()
        self._show(runner)

    def _expire_in(self, runner: FakeRunner, seconds: float) -> None:
        lifetime = FOREVER_NS if math.isinf(seconds) else int(seconds * 1e9)
        runner.expires_at_ns = min(time.time_ns() + lifetime, FOREVER_NS)
        self._show(runner)

    def _show(self, runner: FakeRunner) -> None:
        session = runner.session
        self.engine.loaded[runner.model.name] = LoadedModel(
            expires_at_ns=runner.expires_at_ns,
            context_length=runner.options.num_ctx,
            session_ns=FOREVER_NS if math.isinf(session) else int(max(session, 0) * 1e9),
        )

    def _drop(self, runner: FakeRunner) -> None:
        self.runners.pop(runner.model.blob, None)
        self.engine.loaded.pop(runner.model.name, None)

    def options_of(self, name: str) -> dict[str, Any] | None:
        """The resident runner's num_ctx and shift (for a test's assertions)."""
        runner = next((r for r in self.runners.values() if r.model.name == name), None)
        return (
            None
            if runner is None
            else {"num_ctx": runner.options.num_ctx, "shift": runner.options.shift}
        )

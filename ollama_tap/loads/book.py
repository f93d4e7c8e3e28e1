"""LoadBook: what one box's load tracker knows — its runners, the load events it saw and
their metrics — and how each /api/ps snapshot reconciles it (loads no reply showed, why
models left). The observer's hooks on exchanges are `tracker.LoadTracker`, built on it."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.loads.events import Cause, Departure, LoadEvent
from ollama_tap.loads.metrics import LoadMetrics
from ollama_tap.loads.runners import Runners, Upstream
from ollama_tap.loads.state import (
    Pending,
    Runner,
    cause_of,
    flushes_on_oom,
    reduced_from,
    set_trigger,
    why_gone,
)
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.names import model_key
from ollama_tap.ollama.state import LoadedModel
from ollama_tap.ollama.version import parse_version

RING: Final = 500
"""Load events kept for /_tap/api/loads."""

log = structlog.get_logger("ollama_tap.loads")


class LoadBook:
    """One box's runners by scheduler key and its last RING load events (rules L0, L3, L5,
    L7 of docs/diagnoses.md act here, on /api/ps snapshots)."""

    def __init__(
        self, registry: CollectorRegistry, labels: ModelLabels, upstream: Upstream
    ) -> None:
        self.m = LoadMetrics(registry)
        self.box = ""
        """The box's name among several (boxes/fleet.py); "" with one plain upstream."""
        self.labels = labels
        self.upstream = upstream
        self.events: deque[LoadEvent] = deque(maxlen=RING)
        self._runners = Runners(labels.spelling)
        self._snapshots = 0
        self._down = False
        self._oom_at = float("-inf")
        labels.on_free(self.m.forget_model)

    def last_load(self, model: str) -> float | None:
        """Seconds the model's last load here took, when a reply said."""
        runner = self._runners.get(self._runners.key(self.upstream, model))
        event = runner.current if runner is not None else None
        return event.load_duration if event is not None else None

    # --- /api/ps

    def ps(self, loaded: dict[str, LoadedModel] | None) -> None:
        """One /api/ps snapshot (None: Ollama stopped answering)."""
        if loaded is None:
            self._down = True
            return
        now, mono = time.time(), time.monotonic()
        rows: dict[str, LoadedModel] = {}
        for entry in loaded.values():
            rows[self._runners.row_key(self.upstream, entry)] = entry
        first, after_down = self._snapshots == 0, self._down
        self._snapshots += 1
        self._down = False
        if first or after_down:
            self._baseline(rows, restart=after_down)
            return
        appeared = [
            k for k, row in rows.items()
            if (not (r := self._runners.of(k, row.name)).resident or r.relisted(row))
            and not self._unloading(k, mono)
        ]  # fmt: skip
        # What may have made room: a model new in this read, one a reply showed loading,
        # or one a request is waiting for (absent while it loads).
        loaders = appeared + [
            k for k, r in self._runners.items()
            if k not in appeared and (r.fresh is not None or (r.flight and not r.resident))
        ]  # fmt: skip
        for key in appeared:
            self._ps_load(self._runners[key], rows[key], mono)
        for key, runner in list(self._runners.items()):
            if runner.resident and key not in rows:
                self._gone(key, runner, now, mono, loaders)
            if key not in rows:
                runner.unloading_until = 0.0  # unloaded: a listing from now on is a load
        for key, row in rows.items():
            runner = self._runners[key]
            fresh = runner.fresh
            if fresh is not None and runner.explains(row, self._retries):
                self._got(runner, fresh, row)
            elif fresh is not None:  # a later reload no reply showed: its options unknown
                runner.opts = runner.manifest = None
            runner.fresh = None
            runner.row, runner.row_idle, runner.row_at = row, not runner.flight, now
        for runner in self._runners.values():
            runner.ended.clear()

    def _baseline(self, rows: dict[str, LoadedModel], *, restart: bool) -> None:
        """The first snapshot (or the first after Ollama was down): models listed are
        resident with unknown options; after a restart, those missing went with it (L7)."""
        for key, runner in self._runners.items():
            if restart and runner.resident and key not in rows:
                runner.resident, runner.departure = False, Departure(Cause.RESTART)
        for key, row in rows.items():
            runner = self._runners.of(key, row.name)
            if not runner.resident and runner.flight:
                self._ps_load(runner, row, time.monotonic())  # loading for a request seen
            elif not runner.resident:
                runner.resident, runner.seen, runner.opts = True, True, None
            runner.row, runner.row_idle, runner.row_at = row, not runner.flight, time.time()
            runner.ended.clear()
            self._zeros(runner.name)

    def _gone(self, key: str, runner: Runner, now: float, mono: float, loaders: list[str]) -> None:
        runner.resident = False
        if runner.flight:
            return  # being reloaded for a request in flight: its reply tells why
        if runner.departure is not None:
            return
        # A new digest under the same name replaced the model rather than evicting it.
        loader = next((k for k in loaders if self._runners[k].name != runner.name), None)
        loader_name = self._runners[loader].name if loader is not None else None
        dep = runner.departure = why_gone(runner, now, mono, loader_name, self._oom_at)
        if dep.cause is Cause.EVICTED and loader is not None:
            self.m.evictions[self._label(runner.name), self._label(dep.by)].inc()
            by = self._runners[loader]
            if by.resident and by.current is not None:
                by.current.evicted.append(runner.name)
            else:
                by.victims.append(runner.name)  # its load is still under way
            log.info("model_evicted", model=runner.name, by=dep.by, **self._where)

    def _ps_load(self, runner: Runner, row: LoadedModel, mono: float) -> None:
        """A model new in /api/ps that no reply has shown loading (L0 b)."""
        loaders = runner.loaders(row, self._retries)
        p = loaders[0] if loaders else None
        event = self._new_event(runner, p, time.time(), mono, source="ps")
        event.noticed = mono
        event.waited = [q.id for q in loaders[1:]]
        self._got(runner, event, row)

    def _got(self, runner: Runner, event: LoadEvent, row: LoadedModel) -> None:
        """The context /api/ps shows after a load; an automatic one smaller than the last."""
        event.context_length = row.context_length
        event.reduced_from = reduced_from(runner, row)
        if event.reduced_from is not None:
            self.m.reduced[(self._label(runner.name),)].inc()
            log.warning("context_reduced", model=runner.name, detail=event.detail)
        if runner.opts is not None and "num_ctx" not in runner.opts:
            runner.auto_ctx = row.context_length

    # --- events

    def _new_event(
        self, runner: Runner, p: Pending | None, at: float, started: float, *, source: str
    ) -> LoadEvent:
        cause, dep = cause_of(runner, p)
        event = LoadEvent(
            runner.name, cause, at, started, departure=dep, source=source, box=self.box
        )
        event.evicted, runner.victims = runner.victims, []
        if p is not None:
            set_trigger(event, p)
            event.changes = list(p.changes) if cause is Cause.OPTIONS_CHANGED else []
            event.predicted = any(c.certain for c in p.changes)
            runner.opts, runner.manifest = p.opts, p.manifest
        else:
            runner.opts = runner.manifest = None
        runner.resident = runner.seen = True
        runner.departure, runner.current, runner.failed = None, event, False
        runner.row = None
        self.events.append(event)
        self._zeros(runner.name)
        self.m.loads[self._label(runner.name), str(cause)].inc()
        log.info(
            "model_load", model=runner.name, cause=str(cause), detail=event.detail,
            request=event.request, client=event.client, address=event.address, **self._where,
        )  # fmt: skip
        return event

    def _unloading(self, key: str, mono: float) -> bool:
        return self._runners[key].unloading_until > mono

    def _zeros(self, name: str) -> None:
        """Every cause of a model a series from its first sight, so increase() sees the
        first load of each."""
        label = self._label(name)
        if (label, str(Cause.UNKNOWN)) not in self.m.loads:
            for cause in Cause:
                self.m.loads[label, str(cause)].inc(0)
            self.m.reduced[(label,)].inc(0)

    @property
    def _retries(self) -> bool:
        """Whether a load that does not fit retries a smaller automatic context (v0.30.0+)."""
        return flushes_on_oom(parse_version(self.upstream.version))

    @property
    def _where(self) -> dict[str, str]:
        """The box, in log lines, when there are several."""
        return {"box": self.box} if self.box else {}

    def _label(self, name: str | None) -> str:
        return self.labels.label(name)

    @property
    def baselined(self) -> bool:
        """Whether a first /api/ps read told what was resident before the proxy saw any
        load: until then a load that is quick (under a second) and done goes unseen."""
        return self._snapshots > 0

    def recent(
        self, model: str | None = None, limit: int = RING, *, with_client: bool = True
    ) -> list[dict[str, Any]]:
        """The newest load events first, optionally of one model (as the API lists them);
        client addresses only `with_client` (full mode, as the records keep them)."""
        wanted = model_key(model) if model else None
        out = []
        for event in reversed(self.events):
            if wanted is None or model_key(event.model) == wanted:
                out.append(event.as_json(with_client=with_client))
                if len(out) >= limit:
                    break
        return out

"""LoadTracker: the observer that turns replies and /api/ps snapshots into load events."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.cloud import is_cloud_model
from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.facts import LoadFact, LoadRole
from ollama_tap.hooks import Phase
from ollama_tap.loads.events import Cause, Departure, LoadEvent
from ollama_tap.loads.metrics import LoadMetrics
from ollama_tap.loads.runners import Runners, Upstream
from ollama_tap.loads.state import (
    DIED_TEXTS,
    OOM_TEXTS,
    SLACK,
    UNLOADING,
    Outlook,
    Pending,
    Runner,
    alike,
    cause_of,
    flushes_on_oom,
    matches,
    reduced_from,
    reused,
    row_stale,
    set_trigger,
    why_gone,
)
from ollama_tap.measures import COLD_START_NS
from ollama_tap.names import ModelLabels
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.ollama.names import model_key
from ollama_tap.ollama.options import (
    Change,
    ModelFacts,
    is_zero_keep_alive,
    reload_changes,
    runner_options,
    shift_field,
)
from ollama_tap.ollama.request import honoured_keep_alive, honoured_options, reads_runner_fields
from ollama_tap.ollama.state import LoadedModel
from ollama_tap.ollama.version import parse_version

NAME: Final = "loads"
RING: Final = 500
"""Load events kept for /_tap/api/loads."""
TRACKED: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes whose requests make Ollama schedule a runner."""

log = structlog.get_logger("ollama_tap.loads")
Known = dict[tuple[ModelFacts, str | None], dict[str, Any]]
"""A request's runner options by the model's facts and the box's version (`outlook`)."""


class LoadTracker:
    """One load event per model load the proxy can see (rules L0–L7 of docs/diagnoses.md).

    `request` notes the runner as the request finds it and predicts a reload (L2, before
    Ollama acts); `response`/`error` turn a reply whose `load_duration` exceeds a second
    into a load event (or a waiter of the one under way), note keep_alive 0 unloads and
    runner failures; `ps` (each /api/ps snapshot) notices loads no reply showed, and why
    models left. Cloud models never reach a runner (C4) and are skipped.
    """

    name = NAME
    phase = Phase.ANALYSIS

    def __init__(
        self,
        registry: CollectorRegistry,
        labels: ModelLabels,
        upstream: Upstream,
        *,
        is_remote: Callable[[str | None], bool] = is_cloud_model,
    ) -> None:
        self.m = LoadMetrics(registry)
        self.box = ""
        """The box's name among several (boxes/fleet.py); "" with one plain upstream."""
        self.labels = labels
        self.upstream = upstream
        self.is_remote = is_remote
        self.events: deque[LoadEvent] = deque(maxlen=RING)
        self._runners = Runners(labels.spelling)
        self._snapshots = 0
        self._down = False
        self._oom_at = float("-inf")
        labels.on_free(self.m.forget_model)

    # --- hooks

    def outlook(self, ex: Exchange, known: Known | None = None) -> Outlook | None:
        """How the exchange's model stands on this box, noting nothing (the router asks each
        box before the request goes to one): None for a route or model not tracked.
        `known` keeps the request's runner options by what they depend on (the model's
        facts, the version) for the next box asked about the same request."""
        model = ex.model
        if ex.endpoint not in TRACKED or not model or self.is_remote(model):
            return None
        key = self._runners.key(self.upstream, model)
        runner = self._runners.get(key)
        facts = ModelFacts(*self.upstream.model_facts(model))
        version = self.upstream.version
        opts = known.get((facts, version)) if known is not None else None
        if opts is None:
            native = reads_runner_fields(ex.endpoint)  # /v1 bodies' options are ignored
            opts = runner_options(
                honoured_options(ex),
                shift_field(ex.request_body) if native else None,
                facts,
                parse_version(version),
            )
            if known is not None:
                known[facts, version] = opts
        if runner is None:
            return Outlook(key, opts)
        resident = runner.resident and not runner.expired_idle(time.time())
        changes: list[Change] = []
        if resident:
            ctx = runner.row.context_length if runner.row is not None else None
            changes = reload_changes(runner.opts, ctx, opts, runner.auto_ctx)
        last = runner.current.load_duration if runner.current is not None else None
        return Outlook(key, opts, resident, changes, last)

    def last_load(self, model: str) -> float | None:
        """Seconds the model's last load here took, when a reply said."""
        runner = self._runners.get(self._runners.key(self.upstream, model))
        event = runner.current if runner is not None else None
        return event.load_duration if event is not None else None

    def request(self, ex: Exchange) -> None:
        seen = self.outlook(ex)
        if seen is None:
            return
        model, key, opts = ex.model or "", seen.key, seen.opts
        runner = self._runners.of(key, model)
        if honoured_keep_alive(ex) is not None:  # the latest keep_alive is the runner's
            runner.unload_after, runner.keep_alive_by = None, ex.id
        now = time.time()
        if runner.resident and runner.expired_idle(now):
            runner.resident, runner.departure = False, Departure(Cause.EXPIRED)
        p = Pending(ex.id, key, model, ex.client_name, ex.client, ex.endpoint, ex.started,
                    ex.started_wall, opts, runner.resident)  # fmt: skip
        p.manifest = self.upstream.digest_of(model)
        row = runner.row
        p.expiring = (
            runner.resident and not runner.flight and row is not None
            and row.expires_at is not None and row.expires_at <= now + SLACK
        )  # fmt: skip
        # Not resident while requests for it are in flight: a load is under way.
        p.behind = not runner.resident and bool(runner.flight)
        if runner.resident:
            p.changes = seen.changes
            if any(c.certain for c in p.changes):
                self._predicted(ex, p)
        runner.flight[ex.id] = p
        ex.metadata[NAME] = p

    def _runner_options(
        self, model: str, options: dict[str, Any] | None, body: bytes | None, native: bool
    ) -> dict[str, Any]:
        facts = ModelFacts(*self.upstream.model_facts(model))
        shift = shift_field(body) if native else None
        return runner_options(options, shift, facts, parse_version(self.upstream.version))

    def reload_for(self, model: str, options: dict[str, Any] | None, body: bytes) -> list[Change]:
        """The fields that would make Ollama reload the resident runner of `model` for a
        native request with these options and body (L2), without noting the request: what
        the reload guard asks before the request goes (ollama_tap/guard.py). Empty when
        the model is not resident (or remote)."""
        if self.is_remote(model):
            return []
        runner = self._runners.get(self._runners.key(self.upstream, model))
        if runner is None or not runner.resident or runner.expired_idle(time.time()):
            return []
        ctx = runner.row.context_length if runner.row is not None else None
        opts = self._runner_options(model, options, body, True)
        return reload_changes(runner.opts, ctx, opts, runner.auto_ctx)

    def response(self, ex: Exchange) -> None:
        p: Pending | None = ex.metadata.pop(NAME, None)
        if p is None:
            return
        runner = self._runners.of(p.key, p.model)
        runner.flight.pop(p.id, None)
        runner.last_end = time.time()
        event = None
        load = ex.usage.load_duration if ex.usage is not None else 0
        long_load_reply = ex.done_reason == "load" and (ex.duration or 0.0) * 1e9 > COLD_START_NS
        if load > COLD_START_NS or long_load_reply:
            event = self._reply_load(runner, p, load / 1e9 if load else ex.duration)
        elif (cur := runner.current) is not None and (cur.request == p.id or p.id in cur.waited):
            event = cur
        if event is not None:
            role = LoadRole.TRIGGER if event.request == p.id else LoadRole.WAITED
            ex.load_event = LoadFact(event.as_json(), role)
        self._after(runner, p, ex)
        if not runner.flight and not runner.seen:
            # Never loaded (a name Ollama refused, a failed request): nothing to keep, and
            # names a client makes up must not pile up here.
            self._runners.pop(p.key, None)

    def error(self, ex: Exchange) -> None:
        self.response(ex)

    def _after(self, runner: Runner, p: Pending, ex: Exchange) -> None:
        """What the end of a request says about its runner's future: unloaded, failed."""
        version = parse_version(self.upstream.version)
        if matches(OOM_TEXTS, ex.error_message) and flushes_on_oom(version):
            self._oom_at = time.monotonic()
        runner.failed = matches(DIED_TEXTS, ex.error_message) or ex.outcome is Outcome.INCOMPLETE
        unload = ex.done_reason == "unload" or (
            is_zero_keep_alive(honoured_keep_alive(ex)) and ex.outcome is Outcome.OK
        )
        latest = runner.keep_alive_by in (None, p.id) or ex.done_reason == "unload"
        if unload and latest and (p.resident or runner.resident):
            runner.unload_after = Departure(
                Cause.UNLOADED, by_request=p.id, client=p.client or None
            )
        if runner.unload_after is not None and not runner.flight:
            runner.resident, runner.departure = False, runner.unload_after
            runner.unload_after = None
            runner.unloading_until = time.monotonic() + UNLOADING
            self.upstream.poke_ps()

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
        for key, row in rows.items():
            runner = self._runners[key]
            fresh = runner.fresh
            if fresh is not None:
                self._got(runner, fresh, row)
                runner.fresh = None
            runner.row, runner.row_idle, runner.row_at = row, not runner.flight, now

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
        p = runner.earliest()
        event = self._new_event(runner, p, time.time(), mono, source="ps")
        event.noticed = mono
        if p is not None:
            event.waited = [q.id for q in runner.flight.values() if q is not p]
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

    def _reply_load(self, runner: Runner, p: Pending, seconds: float | None) -> LoadEvent | None:
        """A reply that waited for a load: the load under way (L0: concurrent cold requests
        are one load, the earliest its trigger), a new one, or none when Ollama reused the
        runner the request found (`reused`)."""
        cur, start = runner.current, p.started
        if cur is not None and (cur.request == p.id or p.id in cur.waited):
            if cur.request == p.id:
                cur.load_duration = seconds  # the trigger, made by a waiter or /api/ps
            return cur
        # One load when the request arrived before it was over and wants the same options.
        if cur is not None and not p.changes and start < cur.window_end(0.0):
            if cur.request is not None and start < cur.started:
                cur.waited.append(cur.request)
                set_trigger(cur, p)
                cur.load_duration = seconds
            elif p.id not in cur.waited:
                cur.waited.append(p.id)
            return cur
        if reused(runner, p):
            return None
        # An earlier request still waiting, that found the runner as this one did, waits
        # for the same load: it is the trigger.
        earlier = [
            q for q in runner.flight.values() if q.started < start and (p.behind or alike(q, p))
        ]
        trigger = min(earlier, key=lambda q: q.started) if earlier else p
        event = self._new_event(runner, trigger, trigger.wall, trigger.started, source="reply")
        if trigger is p:
            event.load_duration = seconds
        else:
            event.waited.append(p.id)
        event.noticed = start + (seconds or 0.0)
        runner.fresh = event
        self.upstream.poke_ps()
        return event

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

    def _predicted(self, ex: Exchange, p: Pending) -> None:
        label = self._label(p.model)
        for change in p.changes:
            self.m.predicted[label, change.field].inc()
        log.warning(
            "reload_predicted", model=p.model, client=ex.client_name or None, address=ex.client,
            request=ex.id,
            changes=[c.text for c in p.changes], **self._where,
        )  # fmt: skip

    def stale_row(self, ex: Exchange) -> bool:
        """Whether the last /api/ps row of the exchange's model may describe another runner
        than the one that served it: the runner was not resident when the request came,
        the request was to change its options, or no read has listed it since its load.
        Asked by the truncation rules (their C) before this tracker's `response`."""
        p = ex.metadata.get(NAME)
        return isinstance(p, Pending) and row_stale(p, self._runners.get(p.key))

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

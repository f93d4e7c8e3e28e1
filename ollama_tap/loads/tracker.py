"""LoadTracker: the observer that turns replies into load events, on the book of one box's
runners (`book.LoadBook`, which reads the /api/ps snapshots)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry

from ollama_tap.cloud import is_cloud_model
from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.facts import LoadFact, LoadRole, ModelFacts, Standing
from ollama_tap.hooks import Phase
from ollama_tap.loads.book import LoadBook, log
from ollama_tap.loads.events import Cause, Departure, LoadEvent
from ollama_tap.loads.runners import Upstream
from ollama_tap.loads.state import (
    DIED_TEXTS,
    OOM_TEXTS,
    SLACK,
    UNLOADING,
    Outlook,
    Pending,
    Runner,
    alike,
    flushes_on_oom,
    matches,
    reused,
    row_stale,
    set_trigger,
)
from ollama_tap.measures import COLD_START_NS
from ollama_tap.names import ModelLabels
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.ollama.options import (
    Change,
    is_zero_keep_alive,
    reload_changes,
    runner_options,
    shift_field,
)
from ollama_tap.ollama.request import honoured_keep_alive, honoured_options, reads_runner_fields
from ollama_tap.ollama.version import parse_version

NAME: Final = "loads"
TRACKED: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes whose requests make Ollama schedule a runner."""

Known = dict[tuple[ModelFacts, str | None], dict[str, Any]]
"""A request's runner options by the model's facts and the box's version (`outlook`)."""


class LoadTracker(LoadBook):
    """One load event per model load the proxy can see (rules L0–L7 of docs/diagnoses.md).

    `request` notes the runner as the request finds it and predicts a reload (L2, before
    Ollama acts); `response`/`error` turn a reply whose `load_duration` exceeds a second
    into a load event (or a waiter of the one under way), note keep_alive 0 unloads and
    runner failures; `ps` (each /api/ps snapshot, LoadBook) notices loads no reply showed,
    and why models left. Cloud models never reach a runner (C4) and are skipped.
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
        super().__init__(registry, labels, upstream)
        self.is_remote = is_remote

    # --- hooks

    def outlook(self, ex: Exchange, known: Known | None = None) -> Outlook | None:
        """How the exchange's model stands on this box, noting nothing (the router asks each
        box before the request goes to one): None for a route or model not tracked.
        `known` keeps the request's runner options by what they depend on (the model's
        facts, the version) for the next box asked about the same request."""
        model = ex.model
        if ex.endpoint not in TRACKED or not model or self.is_remote(model):
            return None
        key, opts, runner = self._asks(ex, model, self.upstream.standing(model), known)
        if runner is None:
            return Outlook(key, opts)
        resident = runner.resident and not runner.expired_idle(time.time())
        changes = self._changes(runner, opts) if resident else []
        last = runner.current.load_duration if runner.current is not None else None
        return Outlook(key, opts, resident, changes, last)

    def _asks(
        self, ex: Exchange, model: str, standing: Standing, known: Known | None = None
    ) -> tuple[str, dict[str, Any], Runner | None]:
        """The runner's key, the runner options the request asks for, and the runner."""
        key = self._runners.key_of(self.upstream, model, standing.digest)
        facts, version = standing.facts, standing.version
        opts = known.get((facts, version)) if known is not None else None
        if opts is None:
            native = reads_runner_fields(ex.endpoint)  # /v1 bodies' options are ignored
            opts = self._options(facts, version, honoured_options(ex), ex.request_body, native)
            if known is not None:
                known[facts, version] = opts
        return key, opts, self._runners.get(key)

    @staticmethod
    def _options(
        facts: ModelFacts,
        version: str | None,
        options: dict[str, Any] | None,
        body: bytes | None,
        native: bool,
    ) -> dict[str, Any]:
        shift = shift_field(body) if native else None
        return runner_options(options, shift, facts, parse_version(version))

    @staticmethod
    def _changes(runner: Runner, opts: dict[str, Any]) -> list[Change]:
        """What would make Ollama reload the resident `runner` for these options (L2)."""
        ctx = runner.row.context_length if runner.row is not None else None
        return reload_changes(runner.opts, ctx, opts, runner.auto_ctx)

    def request(self, ex: Exchange) -> None:
        model = ex.model
        if ex.endpoint not in TRACKED or not model or self.is_remote(model):
            return
        standing = ex.standing = self.upstream.standing(model)
        key, opts, found = self._asks(ex, model, standing)
        runner = found if found is not None else self._runners.of(key, model)
        if honoured_keep_alive(ex) is not None:  # the latest keep_alive is the runner's
            runner.unload_after, runner.keep_alive_by = None, ex.id
        now = time.time()
        if runner.resident and runner.expired_idle(now):
            runner.resident, runner.departure = False, Departure(Cause.EXPIRED)
        p = Pending(ex.id, key, model, ex.client_name, ex.client, ex.endpoint, ex.started,
                    ex.started_wall, opts, runner.resident)  # fmt: skip
        hidden = standing.facts.hidden
        p.manifest = hidden if hidden is not None else standing.digest
        row = runner.row
        p.expiring = (
            runner.resident and not runner.flight and row is not None
            and row.expires_at is not None and row.expires_at <= now + SLACK
        )  # fmt: skip
        # Not resident while requests for it are in flight: a load is under way.
        p.behind = not runner.resident and bool(runner.flight)
        if runner.resident:
            p.changes = self._changes(runner, opts)
            if any(c.certain for c in p.changes):
                self._predicted(ex, p)
        runner.flight[ex.id] = p
        ex.metadata[NAME] = p

    def reload_for(self, model: str, options: dict[str, Any] | None, body: bytes) -> list[Change]:
        """The fields that would make Ollama reload the resident runner of `model` for a
        native request with these options and body (L2), without noting the request: what
        the reload guard asks before the request goes (ollama_tap/guard.py). Empty when
        the model is not resident (or remote)."""
        if self.is_remote(model):
            return []
        standing = self.upstream.standing(model)
        runner = self._runners.get(self._runners.key_of(self.upstream, model, standing.digest))
        if runner is None or not runner.resident or runner.expired_idle(time.time()):
            return []
        opts = self._options(standing.facts, standing.version, options, body, True)
        return self._changes(runner, opts)

    def response(self, ex: Exchange) -> None:
        p: Pending | None = ex.metadata.pop(NAME, None)
        if p is None:
            return
        runner = self._runners.of(p.key, p.model)
        runner.flight.pop(p.id, None)
        runner.last_end = time.time()
        runner.end(p)
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
        return isinstance(p, Pending) and row_stale(p, self._runners.get(p.key), self._retries)

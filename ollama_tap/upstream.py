"""Poller of Ollama's /api/version, /api/tags, /api/ps and /api/show: upstream and model state."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Final

import aiohttp
import orjson
import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.boxes.shown import ShownModels
from ollama_tap.boxes.spec import DEFAULT_BOX, BoxSpec
from ollama_tap.config import Settings
from ollama_tap.facts import Standing
from ollama_tap.metrics.registered import UpstreamMetrics
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.names import model_key
from ollama_tap.ollama.payloads import count_or_none, count_or_zero, dict_or_none, str_or_empty
from ollama_tap.ollama.state import LoadedModel, LocalModel, Shown, go_time, same_model, shown_facts
from ollama_tap.ollama.state import entries as rows_of
from ollama_tap.polled import Polled

PsListener = Callable[["dict[str, LoadedModel] | None"], None]
"""Told each /api/ps snapshot (by model key), or None when Ollama stopped answering."""

POLL_TIMEOUT: Final = aiohttp.ClientTimeout(total=10, sock_connect=3)
"""Polls, not proxied traffic: a slow answer is a failed poll, retried next interval."""

log = structlog.get_logger("ollama_tap.upstream")


class PollError(Exception):
    """One read of the upstream failed (unreachable, status, or not the JSON expected)."""


class UpstreamPoller:
    """Reads Ollama every `poll_interval` seconds and keeps the upstream and model gauges.

    Each round reads /api/version (which decides `up`), then, when up, /api/ps (loaded
    models, their runtime context, load and unload counts) and /api/tags (the known model
    names, and /api/show once per new digest for `model_info`), ps first so that slow shows
    never delay it. While Ollama is down, no model is reported loaded (its gauges would
    describe a server that is not answering); the first read after is a new baseline.
    Failures count in `ollama_tap_upstream_poll_errors_total`; only changes of state are
    logged.
    """

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        labels: ModelLabels,
        *,
        session: aiohttp.ClientSession | None = None,
        box: BoxSpec | None = None,
    ) -> None:
        box = box if box is not None else settings.boxes[0]
        self.interval = settings.poll_interval
        self.base = box.url
        self.name = box.name
        """The box's name (`default` for the one plain upstream)."""
        self._sources = ("tags", "ps") if box.name == DEFAULT_BOX else (
            f"tags@{box.name}", f"ps@{box.name}"
        )  # fmt: skip
        """Its names' sources in ModelLabels: the known names are every box's union."""
        self.labels = labels
        self.m = UpstreamMetrics(registry)
        self._session = session
        self._owns_session = session is None
        self._up: bool | None = None
        self.polled = Polled(ShownModels(self.m.model_info), self.poke_ps)
        """What the last reads said: the one place the poller keeps it, and what the
        per-exchange code asks."""
        self._resident: set[str] = set()
        self._ps_listeners: list[PsListener] = []
        self._tags_lock = asyncio.Lock()
        self._ps_lock = asyncio.Lock()
        """One /api/ps read at a time: an older reply landing late would roll state back."""
        self._main: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Task[None]] = {}
        labels.set_refresher(self.refresh_tags)
        labels.on_free(self._forget_model)

    @property
    def up(self) -> bool:
        """Whether Ollama answered the last /api/version read."""
        return bool(self._up)

    @property
    def known_down(self) -> bool:
        """Whether the last /api/version read failed (False before the first read)."""
        return self._up is False

    async def start(self) -> None:
        """Open the poller's own session (unless one was given) and start polling."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=POLL_TIMEOUT, trust_env=False, cookie_jar=aiohttp.DummyCookieJar()
            )
        self._main = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the polls in progress and close the session the poller opened."""
        tasks = [t for t in (self._main, *self._pending.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def version(self) -> str | None:
        """Ollama's version per the last /api/version read (None before the first)."""
        return self.polled.version

    @property
    def shown(self) -> ShownModels:
        """What /api/show said of each listed model."""
        return self.polled.shown

    def context_length(self, model: str | None) -> int | None:
        """The runtime context (num_ctx) of a loaded model per the last /api/ps, else None."""
        entry = self.loaded(model)
        return None if entry is None else entry.context_length

    def digest_of(self, model: str | None) -> str | None:
        """The digest of the model a name stands for now (Polled.digest_of)."""
        return self.polled.digest_of(model)

    def has(self, key: str) -> bool:
        """Whether /api/tags lists the model of this key (model_key), or /api/ps shows it."""
        return key in self.polled.tags or self.resident(key)

    def resident(self, key: str) -> bool:
        """Whether the last /api/ps lists the model of this key, under its name or another
        of its digest's."""
        return key in self._resident

    def _note_resident(self) -> None:
        """The keys `resident` answers for, made once per read (the router asks per box)."""
        loaded = self.polled.ps or {}
        digests = {e.digest for e in loaded.values() if e.digest}
        tags = self.polled.tags
        self._resident = set(loaded) | {k for k, t in tags.items() if t.digest in digests}

    def loaded_keys(self) -> set[str]:
        """The model keys the last /api/ps listed (none while Ollama is down)."""
        return set(self.polled.ps or ())

    def on_ps(self, listener: PsListener) -> None:
        """Call `listener` with every /api/ps snapshot, and None when Ollama went down."""
        self._ps_listeners.append(listener)

    def standing(self, model: str | None) -> Standing:
        """What the poller knows of a model beyond /api/ps (Polled.standing)."""
        return self.polled.standing(model)

    def runner_key(self, digest: str | None) -> str | None:
        """A digest's runner key (ShownModels.runner_key)."""
        return self.polled.runner_key(digest)

    def poke_ps(self, then: Callable[[], None] | None = None) -> None:
        """Read /api/ps soon, e.g. after a load, so utilization uses the new num_ctx; call
        `then` once that read has ended (read or failed), or at once if none can be made."""
        task = self._schedule("ps", self.poll_ps)
        if then is None:
            return
        if task is None:
            then()
        else:
            task.add_done_callback(lambda _: then())

    def refresh_tags(self) -> None:
        """Read /api/tags soon (ModelLabels calls it, rate-limited, for an unknown name)."""
        self._schedule("tags", self.poll_tags)

    async def poll(self) -> None:
        """One round: version, then tags and ps when Ollama answered."""
        try:
            reply = await self._read("GET", "api/version")
        except PollError as exc:
            self._set_up(False, str(exc))
            async with self._ps_lock:  # a poked read in flight must not bring them back
                self._forget_loaded()
                self._tell_ps(None)
            return
        version = str(reply.get("version", ""))
        self._set_up(True, version)
        self._set_version(version)
        await self.poll_ps()
        await self.poll_tags()

    async def poll_tags(self) -> None:
        async with self._tags_lock:
            if (data := await self._poll("api/tags")) is None:
                return
            entries = rows_of(data)
            self.labels.set_known(self._sources[0], (name for name, _ in entries))
            self.polled.tags = tags = {
                model_key(name): LocalModel(
                    self.labels.label(name), name, str_or_empty(e.get("digest"))
                )
                for name, e in entries
            }
            self._note_resident()
            await self.shown.update(tags, self._show)

    async def poll_ps(self) -> None:
        async with self._ps_lock:
            if (data := await self._poll("api/ps")) is not None:
                self._take_ps(data)

    async def _poll(self, path: str) -> dict[str, Any] | None:
        """One GET of a state route; None when it failed (counted by `_read`)."""
        try:
            return await self._read("GET", path)
        except PollError as exc:
            log.debug("poll_failed", error=str(exc))
            return None

    def _take_ps(self, data: dict[str, Any]) -> None:
        entries = rows_of(data)
        self.labels.set_known(self._sources[1], (name for name, _ in entries))
        loaded = {model_key(name): self._loaded_model(name, e) for name, e in entries}
        self._count_transitions(loaded)
        for entry in loaded.values():
            self.m.loaded.labels(entry.label).set(1)
            self.m.size.labels(entry.label).set(entry.size)
            self.m.vram.labels(entry.label).set(entry.size_vram)
            if entry.context_length is not None:
                self.m.context_length.labels(entry.label).set(entry.context_length)
            else:
                self._remove_gauges(entry.label, self.m.context_length)
        self.polled.ps = loaded
        self._note_resident()
        self._tell_ps(loaded)

    def _tell_ps(self, loaded: dict[str, LoadedModel] | None) -> None:
        for listener in self._ps_listeners:
            try:
                listener(loaded)
            except Exception:
                # A listener's fault must not stop the gauges of the next snapshot.
                self.m.poll_errors.inc()
                log.exception("ps_listener_failed")

    @property
    def _model_gauges(self) -> tuple[Any, ...]:
        """The gauges a loaded model has besides `model_loaded` (kept at 0 after unload)."""
        return (self.m.size, self.m.vram, self.m.context_length)

    def _forget_loaded(self) -> None:
        for entry in (self.polled.ps or {}).values():
            self._remove_gauges(entry.label, *self._model_gauges, self.m.loaded)
        self.polled.ps = None
        self._note_resident()

    def _forget_model(self, label: str) -> None:
        """A freed label slot: the counters and the 0 `model_loaded` an unload left go too."""
        self._remove_gauges(label, self.m.loaded, self.m.unloads)

    @staticmethod
    def _remove_gauges(label: str, *gauges: Any) -> None:
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(label)

    def _loaded_model(self, name: str, e: dict[str, Any]) -> LoadedModel:
        return LoadedModel(
            label=self.labels.label(name),
            digest=str_or_empty(e.get("digest")),
            size=count_or_zero(e.get("size")),
            size_vram=count_or_zero(e.get("size_vram")),
            context_length=count_or_none(e.get("context_length")),
            name=name,
            expires_at=go_time(e.get("expires_at")),
            format=str_or_empty((dict_or_none(e.get("details")) or {}).get("format")),
        )

    def _count_transitions(self, loaded: dict[str, LoadedModel]) -> None:
        # The first read is a baseline: models loaded before the proxy started are not loads
        # it saw, but their counters start at 0 so increase() sees the first real one.
        # A new digest under the same name (pulled again, then used) is the old model
        # unloaded and the new one loaded. Loads are counted, with their cause, by the
        # load tracker (ollama_tap/loads/), which also sees loads that fall between two reads.
        before = self.polled.ps
        for key, entry in loaded.items():
            self.m.unloads.labels(entry.label)
            if before is not None and not same_model(before.get(key), entry):
                log.info("model_loaded", model=entry.label, digest=entry.digest)
        for key, entry in (before or {}).items():
            if not same_model(entry, loaded.get(key)):
                self.m.unloads.labels(entry.label).inc()
                log.info("model_unloaded", model=entry.label, digest=entry.digest)
                if key not in loaded:
                    self.m.loaded.labels(entry.label).set(0)
                    self._remove_gauges(entry.label, *self._model_gauges)

    async def _show(self, name: str) -> Shown | None:
        try:
            data = await self._read("POST", "api/show", {"model": name})
        except PollError as exc:
            log.debug("poll_failed", error=str(exc))
            return None
        return shown_facts(data)

    def loaded(self, model: str | None) -> LoadedModel | None:
        """The /api/ps entry of a name, or of another of its digest's (Polled.loaded)."""
        return self.polled.loaded(model)

    def _set_up(self, up: bool, detail: str) -> None:
        self.m.up.set(1 if up else 0)
        if up != self._up:
            if up:
                log.info("upstream_up", upstream=str(self.base), box=self.name, version=detail)
            else:
                log.warning("upstream_down", upstream=str(self.base), box=self.name, error=detail)
        self._up = up

    def _set_version(self, version: str) -> None:
        old = self.polled.version
        if version == old:
            return
        if old is not None:
            self.m.info.remove(old)
            log.info("upstream_version_changed", old=old, new=version)
        self.m.info.labels(version).set(1)
        self.polled.version = version

    async def _read(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One JSON object from the upstream; any failure is counted and raised as PollError."""
        if self._session is None:
            raise PollError("the poller is not started")
        try:
            async with self._session.request(method, self.base / path, json=body) as resp:
                if resp.status != 200:
                    raise PollError(f"/{path}: HTTP {resp.status}")
                data = orjson.loads(await resp.read())
            if not isinstance(data, dict):
                raise PollError(f"/{path}: not a JSON object")
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, PollError) as exc:
            self.m.poll_errors.inc()
            raise PollError(str(exc) or type(exc).__name__) from exc
        return data

    async def _run(self) -> None:
        while True:
            await self._guarded(self.poll)
            await asyncio.sleep(self.interval)

    async def _guarded(self, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await job()
        except Exception:
            # A reply shaped unlike any Ollama's must not end the polling for good.
            self.m.poll_errors.inc()
            log.exception("poll_crashed")

    def _schedule(
        self, kind: str, job: Callable[[], Coroutine[Any, Any, None]]
    ) -> asyncio.Task[None] | None:
        """The read of `kind` to come: a new one, or the one already scheduled."""
        if self._session is None:
            return None
        if kind in self._pending:
            return self._pending[kind]
        task = asyncio.get_running_loop().create_task(self._guarded(job))
        self._pending[kind] = task
        task.add_done_callback(lambda _: self._pending.pop(kind, None))
        return task

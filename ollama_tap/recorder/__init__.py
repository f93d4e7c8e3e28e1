"""The recorder observer: one row per exchange in scope (SQLite or PostgreSQL), as the
privacy mode allows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from prometheus_client import CollectorRegistry

from ollama_tap.config import RecordMode, Settings
from ollama_tap.exchange import Exchange, OutputChunk
from ollama_tap.hooks import Phase
from ollama_tap.metrics.registered import RecorderMetrics
from ollama_tap.names import recordable
from ollama_tap.rawreply import RawReply
from ollama_tap.recorder.reads import Reads
from ollama_tap.recorder.record import Origin
from ollama_tap.recorder.retention import Retention
from ollama_tap.recorder.scope import Capture, Scope, scope_of
from ollama_tap.recorder.store import Store
from ollama_tap.recorder.stores import sink_for
from ollama_tap.recorder.timeline import Timeline
from ollama_tap.recorder.writer import Writer

STOP_TIMEOUT: Final = 10.0
"""Seconds `stop` waits for the writer to drain the queue."""
_KEY: Final = "recorder"


class Recorder:
    """Records exchanges (hooks on the loop, O(1) each) through a queue to a writer thread.

    ``request`` decides the scope and resolves the model's digest at that moment (or the
    end does, for a model named only by a body that ended after the reply began); ``chunk``
    appends to the compact timeline in ``ex.metadata["recorder"]``; ``response`` / ``error``
    hand the finished Exchange to the writer. In ``full`` mode the timeline keeps the text,
    and is the exchange's ``output_text`` for the spans (one copy of every piece, not two),
    and the recorder asks the driver for the reply's bytes (``ex.raw_reply``, hooks.py).
    With ``--record off`` every hook returns at once and no database file is created;
    ``store`` still reads an existing one.
    """

    name = "recorder"
    phase = Phase.SINK

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        digest_of: Callable[[str], str | None] | None = None,
        version_of: Callable[[Exchange], str | None] | None = None,
        spelling: Callable[[str | None], str | None] = recordable,
    ) -> None:
        self.mode = settings.record_mode
        self.record_routes = settings.record_routes
        self.raw_limit = settings.reply_tee_limit
        self.digest_of = digest_of
        """The model's current digest by canonical name (the upstream poller's knowledge)."""
        self.version_of = version_of
        """The Ollama version of the exchange's box, per its poller's last /api/version read."""
        self.spelling = spelling
        """The `model` column: the canonical name as typed, or as Ollama lists it (names.py)."""
        self.store = Store(settings.db_location, settings.db_timeout)
        self.reads = Reads(settings.db_timeout)
        """How the read API runs the store's reads (bounded, off the loop)."""
        self.db_timeout = settings.db_timeout
        self._watch: asyncio.TimerHandle | None = None
        self.metrics = RecorderMetrics(registry)
        self.writer: Writer | None = None
        if self.mode is not RecordMode.OFF:
            retention = Retention(settings.retention_days * 86400.0, settings.retention_bytes)
            upstream = str(settings.upstream_url.with_user(None))
            self.writer = Writer(
                sink_for(settings.db_location, self.metrics, settings.db_timeout),
                self.mode,
                settings.recorder_queue,
                retention,
                self.metrics,
                Origin(
                    settings.instance_name,
                    upstream,
                    {b.name: str(b.url.with_user(None)) for b in settings.boxes},
                ),
            )

    async def start(self) -> None:
        """Open and migrate the database (in a thread) and start the writer thread."""
        if self.writer is not None:
            await asyncio.to_thread(self.writer.open)
            self.writer.start()
            self._watch_writes()

    def _watch_writes(self) -> None:
        """Every few seconds, have the writer say (once) that a write is stuck: a database
        that never answers fails nothing, so the writer cannot say so itself."""
        assert self.writer is not None
        self.writer.check_stuck(self.db_timeout)
        every = max(1.0, self.db_timeout / 3)
        self._watch = asyncio.get_running_loop().call_later(every, self._watch_writes)

    async def stop(self) -> None:
        """Write everything queued so far and close, waiting at most STOP_TIMEOUT."""
        if self._watch is not None:
            self._watch.cancel()
        if self.writer is not None:
            await asyncio.to_thread(self.writer.stop, STOP_TIMEOUT)
        await asyncio.to_thread(self.store.close)

    def _capture(self, ex: Exchange) -> Capture | None:
        scope = scope_of(ex, self.record_routes)
        cap = None
        if scope is not None:
            keep_text = self.mode is RecordMode.FULL
            timeline = Timeline(keep_text=keep_text) if scope is Scope.FULL else None
            cap = Capture(scope, None, None, timeline)
            cap.version = self.version_of(ex) if self.version_of is not None else None
            if timeline is not None and keep_text:
                ex.output_text = timeline
                if not ex.response_bytes:
                    # The reply's bytes as relayed, for `replay serve`; only from its first byte.
                    cap.raw = ex.raw_reply = RawReply(self.raw_limit)
            self._name(ex, cap)
        ex.metadata[_KEY] = cap
        return cap

    def _name(self, ex: Exchange, cap: Capture) -> None:
        model = cap.model = self.spelling(ex.model)
        cap.digest = self.digest_of(model) if model and self.digest_of else None

    def request(self, ex: Exchange) -> None:
        if self.writer is not None:
            self._capture(ex)

    def chunks(self, ex: Exchange, pieces: Sequence[OutputChunk]) -> None:
        cap: Capture | None = ex.metadata.get(_KEY)  # typed: compiled, the calls are direct
        if cap is not None and (timeline := cap.timeline) is not None:
            started = ex.started
            for piece in pieces:
                timeline.add(piece.at - started, piece)

    def response(self, ex: Exchange) -> None:
        if self.writer is None:
            return
        cap = ex.metadata[_KEY] if _KEY in ex.metadata else self._capture(ex)
        if cap is not None:
            if cap.model is None and ex.model is not None:
                # The upstream answered before the request body came: named at its end.
                self._name(ex, cap)
            self.writer.submit(ex, cap)

    def error(self, ex: Exchange) -> None:
        self.response(ex)

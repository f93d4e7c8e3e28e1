"""Observer protocol and safe dispatch of the exchange hooks.

An observer is any object with methods named after hooks; it implements only those it needs.
Hooks fire in this order for every exchange, from the event loop, and must return quickly
(no I/O: hand slow work to a queue or a thread):

- ``request(ex)``: once, when the request body has been relayed upstream (or the upstream
  answered first, or could not be reached) and its fields are on ``ex.request``. When the
  upstream answered first, they are those of what had arrived; ``ex.request`` is completed
  from the rest of the body (read for the record) before ``response`` or ``error``.
- ``response_headers(ex)``: once, when the upstream's status and headers are known, right
  after the client's response head was written (observers never delay the first token),
  and ``request`` with it if the upstream answered before that had run. Not fired when the
  upstream was unreachable.
- ``chunk(ex, piece)``: for each output piece (``OutputChunk``), right after the bytes
  carrying it were written to the client. Only for replies whose framing was parsed.
  An observer may implement ``chunks(ex, pieces)`` instead: the same pieces, in the same
  order, one call per socket read that carried them (a burst brings dozens of tokens in
  one read; one call for all of them is what keeps a burst cheap), all with the same
  ``at``. When both exist, ``chunks`` is called and ``chunk`` is not.
- ``response(ex)``: the upstream's reply was relayed as far as it went; ``ex.outcome`` is
  ``ok``, ``upstream_error``, ``stream_error`` or ``incomplete`` (no final object, including
  an upstream that died mid-stream).
- ``error(ex)``: the proxy could not relay the reply; ``ex.outcome`` is
  ``client_disconnected``, ``upstream_unreachable``, ``proxy_error`` or ``shutdown``.

Every exchange that fired ``request`` receives exactly one of ``response`` or ``error``.
A failing observer is logged, counted in ``ollama_tap_observer_errors_total{observer,hook}``
and skipped; it never breaks a client stream or the other observers.

Observers share what they find only as typed fields of the Exchange, never through each
other's modules: the client's name (``client_name``), the truncation verdict
(``truncation``), the model load (``load_event``), the kept output text (``output_text``).
``ex.metadata`` holds each observer's own state between its hooks, read by no other. So
that a fact is there before anyone reads it, each observer declares its ``phase`` and every
hook calls the observers phase by phase (``Phase``: names, then analysis, then sinks), in
the order given within a phase.

One capability reaches into the data path: at ``request`` an observer may set
``ex.raw_reply = RawReply(limit)`` (ollama_tap/rawreply.py). The driver then adds every
read of the reply body to it as relayed, with its write time, and drops it (sets the field
to None) once the body passes ``limit``. Nothing else an observer does touches the bytes.
The recorder asks for it in ``full`` mode, for ``replay serve``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Exchange, Outcome, OutputChunk
from ollama_tap.metrics.families import OBSERVER_ERRORS
from ollama_tap.metrics.registered import counter

_PER_EXCHANGE: Final = ("request", "response_headers", "response", "error")
"""The hooks fired once per exchange; `chunk` (and `chunks`) are dispatched per read."""
_RESPONSE_OUTCOMES: Final = frozenset(
    {Outcome.OK, Outcome.UPSTREAM_ERROR, Outcome.STREAM_ERROR, Outcome.INCOMPLETE}
)

log = structlog.get_logger("ollama_tap.hooks")


class Phase(enum.IntEnum):
    """When an observer runs, among the others, at every hook: after whoever leaves what it
    reads. An observer declares it as its ``phase`` attribute."""

    NAMES = 1
    """Names the exchange for everyone else: the client's name at ``request``, the model
    names a reply head proves at ``response_headers`` (the metrics labels)."""
    ANALYSIS = 2
    """Derives facts from the exchange (reading names only) and leaves them on its typed
    fields (ollama_tap/facts.py): the truncation verdict, the load event; the in-flight set."""
    SINK = 3
    """Reads the exchange and every fact, and leaves nothing another observer reads before
    the end: metrics, records, spans, log lines. An observer that declares no phase is one."""


def observer_name(observer: object) -> str:
    return str(getattr(observer, "name", type(observer).__name__))


def phase_of(observer: object) -> Phase:
    found = getattr(observer, "phase", Phase.SINK)
    if not isinstance(found, Phase):
        name = observer_name(observer)
        raise TypeError(f"observer {name}: `phase` must be a hooks.Phase, not {found!r}")
    return found


class Hooks:
    """Dispatches hook calls to the observers that implement them, phase by phase."""

    def __init__(self, observers: Iterable[object], registry: CollectorRegistry) -> None:
        self.observers = sorted(observers, key=phase_of)  # stable: given order within a phase
        self._errors = counter(registry, OBSERVER_ERRORS)
        # Bound methods resolved once, so a hook with no takers costs one empty loop.
        self._table: dict[str, list[tuple[str, Callable[..., Any]]]] = {
            hook: [
                (observer_name(o), getattr(o, hook))
                for o in self.observers
                if callable(getattr(o, hook, None))
            ]
            for hook in _PER_EXCHANGE
        }
        self._batch_takers: list[tuple[str, Callable[..., Any]]] = []
        self._piece_takers: list[tuple[str, Callable[..., Any]]] = []
        for o in self.observers:
            batch, piece = getattr(o, "chunks", None), getattr(o, "chunk", None)
            if callable(batch):
                self._batch_takers.append((observer_name(o), batch))
            elif callable(piece):
                self._piece_takers.append((observer_name(o), piece))
        self.wants_chunks = bool(self._batch_takers or self._piece_takers)

    def _call(self, hook: str, *args: Any) -> None:
        self._dispatch(hook, self._table[hook], *args)

    def _dispatch(
        self, hook: str, takers: list[tuple[str, Callable[..., Any]]], *args: Any
    ) -> None:
        for name, method in takers:
            try:
                method(*args)
            except Exception:
                self._errors.labels(name, hook).inc()
                log.exception("observer_failed", observer=name, hook=hook)

    def request(self, ex: Exchange) -> None:
        self._call("request", ex)

    def response_headers(self, ex: Exchange) -> None:
        self._call("response_headers", ex)

    def chunks(self, ex: Exchange, pieces: list[OutputChunk]) -> None:
        """The output pieces one socket read carried: `chunks` takers get them at once,
        `chunk` takers one by one (errors of either are counted under the hook "chunk")."""
        # The loop of _dispatch, inline: this runs for every read of every stream.
        for name, method in self._batch_takers:
            try:
                method(ex, pieces)
            except Exception:
                self._errors.labels(name, "chunk").inc()
                log.exception("observer_failed", observer=name, hook="chunk")
        for piece in pieces if self._piece_takers else ():
            self._dispatch("chunk", self._piece_takers, ex, piece)

    def end(self, ex: Exchange) -> None:
        """Fire ``response`` or ``error`` according to ``ex.outcome``."""
        self._call("response" if ex.outcome in _RESPONSE_OUTCOMES else "error", ex)

"""Finished spans built whole and handed to the batch processor.

An exchange's spans are known complete only at its end, so they are made there as the SDK's
`ReadableSpan`s (what a Tracer's span becomes when it ends), not started and ended through
a Tracer: that path validates and copies each attribute under a lock, takes the current
context and runs span processors' starts, which was most of the export's cost per exchange
(docs/opentelemetry.md, "What it costs"). The attributes here are plain values the mapping
made (str, bool, int, float, tuples of str), so nothing needs cleaning.

The sampler is asked once per exchange, with the same arguments a Tracer gives it (except
by the default one, whose answer for a trace the app did not start is always "sampled");
the CLIENT child follows its parent's decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags, TraceState

from ollama_tap.relay.trace_context import random_id
from ollama_tap.relay.trace_ids import TraceIds

SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_OTLP_SERVER: Final = 2
_OTLP_CLIENT: Final = 3
"""OTLP's SpanKind numbers (the SDK's enum counts from INTERNAL = 0)."""
_OTLP_ERROR: Final = 2
"""OTLP's STATUS_CODE_ERROR."""
UNSET: Final = Status()
_DEFAULT_ON: Final[str] = DEFAULT_ON.get_description()  # type: ignore[no-untyped-call]
"""The SDK's default sampler as it describes itself (ParentBased's method is untyped)."""


class SpanIds:
    """The ids an exchange's spans get: the trace (the app's, when it sent one), the parent
    the SERVER span names (the app's span, or none), and the two spans' own ids."""

    __slots__ = ("client", "parent", "server", "trace_id", "trace_state")

    def __init__(self, parent: SpanContext | None, told: TraceIds | None = None) -> None:
        """`told`: the ids the upstream was sent (`--otel-propagate`), which win; the app's
        span stays the parent when it is of the same trace (both read its traceparent)."""
        if parent is not None and not parent.is_valid:
            parent = None
        if told is not None and parent is not None and parent.trace_id != told.trace_id:
            parent = None
        self.parent = parent
        self.trace_state = parent.trace_state if parent is not None else TraceState()
        if told is not None:
            self.trace_id, self.client = told.trace_id, told.client_span_id
        else:
            self.trace_id = parent.trace_id if parent is not None else random_id(128)
            self.client = random_id(64)
        self.server = random_id(64)


def remote_parent(context: Context | None) -> SpanContext | None:
    """The app's span an extracted context names, if any."""
    if context is None:
        return None
    found = trace.get_current_span(context).get_span_context()
    return found if found.is_valid else None


class Emitter:
    """Makes the SERVER span and its CLIENT child of one exchange and ends them into the
    processors (the drop count's, then the batch processor)."""

    def __init__(
        self,
        resource: Resource,
        scope: InstrumentationScope,
        sampler: Sampler,
        processors: Sequence[SpanProcessor],
    ) -> None:
        self.resource = resource
        self.scope = scope
        self.sampler = sampler
        self.processors = tuple(processors)
        # The SDK's default sampler samples every trace the app did not start: the proxy's
        # own roots need not ask it (a fifth of the loop's share per exchange).
        self._roots_sampled = sampler.get_description() == _DEFAULT_ON

    def emit(
        self,
        name: str,
        ids: SpanIds,
        context: Context | None,
        times: tuple[int, int],
        server_attributes: dict[str, Any],
        client_attributes: dict[str, Any],
        events: Sequence[tuple[str, int]],
        error: str | None,
    ) -> bool:
        """False when the sampler dropped the exchange. `context` is the extracted one the
        sampler sees as the parent; `error` the description of a failure's status."""
        state = ids.trace_state
        if context is not None or not self._roots_sampled:
            sampled = self.sampler.should_sample(
                context, ids.trace_id, name, SpanKind.SERVER, server_attributes
            )
            if sampled.decision is not Decision.RECORD_AND_SAMPLE:
                return False  # recorded only, it would not be exported either
            if sampled.attributes:
                server_attributes = {**server_attributes, **sampled.attributes}
            if sampled.trace_state is not None:
                state = sampled.trace_state
        server = SpanContext(ids.trace_id, ids.server, False, SAMPLED, state)
        client = SpanContext(ids.trace_id, ids.client, False, SAMPLED, state)
        status = UNSET if error is None else Status(trace.StatusCode.ERROR, error)
        # What the OTLP/HTTP body is written from (ollama_tap/otel/wire.py), as plain values.
        state_text = ",".join(f"{k}={v}" for k, v in state.items()) if state else ""
        code = (0, None) if error is None else (_OTLP_ERROR, error)
        parent = ids.parent
        made = (
            WireSpan(
                ((ids.trace_id, ids.client, ids.server), False, state_text, name, _OTLP_CLIENT,
                 times, client_attributes, (), code),
                self._span(name, client, server, SpanKind.CLIENT, client_attributes, (), status,
                           times),
            ),
            WireSpan(
                ((ids.trace_id, ids.server, parent.span_id if parent is not None else 0),
                 parent is not None and parent.is_remote, state_text, name, _OTLP_SERVER, times,
                 server_attributes, [(event, at, {}) for event, at in events], code),
                self._span(name, server, parent, SpanKind.SERVER, server_attributes,
                           [Event(event, None, at) for event, at in events], status, times),
            ),
        )  # fmt: skip
        for span in made:
            for processor in self.processors:
                processor.on_end(span)
        return True

    def _span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        events: Sequence[Event],
        status: Status,
        times: tuple[int, int],
    ) -> tuple[Any, ...]:
        """ReadableSpan's arguments, in its order."""
        return (
            name, context, parent, self.resource, attributes, events, (), kind, None, status,
            times[0], times[1], self.scope,
        )  # fmt: skip


class WireSpan(ReadableSpan):
    """A finished span that also holds its fields as ollama_tap/otel/wire.py writes them
    (`wire_fields`): the OTLP/HTTP export reads those instead of a dozen SDK properties a
    span, each a Python call, which were a third of its work."""

    def __init__(self, wire_fields: tuple[Any, ...], args: tuple[Any, ...]) -> None:
        super().__init__(*args)
        self.wire_fields = wire_fields

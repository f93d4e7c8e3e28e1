"""Finished spans built whole and handed to the batch processor.

An exchange's spans are known complete only at its end, so they are made there as the SDK's
`ReadableSpan`s (what a Tracer's span becomes when it ends), not started and ended through
a Tracer: that path validates and copies each attribute under a lock, takes the current
context and runs span processors' starts, which was most of the export's cost per exchange
(docs/opentelemetry.md, "What it costs"). The attributes here are plain values the mapping
made (str, bool, int, float, tuples of str), so nothing needs cleaning but their length,
which the SDK's span limits bound (`bound`, the limit from ollama_tap/otel/export.py).

The sampler is asked once per exchange, with the same arguments a Tracer gives it (except
by the default one, whose answer for a trace the app did not start is always "sampled");
the CLIENT child follows its parent's decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags, TraceState

from ollama_tap.facts import TraceIds

SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
UNSET: Final = Status()
NAME_LENGTH: Final = 256
"""Characters of a span name kept: it holds the model the client named, which may be anything
(the attribute `gen_ai.request.model` keeps it up to the attribute limit)."""
SPAN_OVERHEAD: Final = 1024
"""Bytes a span is counted for beyond its text: ids, times, numbers, keys, the objects."""
_IDS: Final = RandomIdGenerator()
_DEFAULT_ON: Final[str] = DEFAULT_ON.get_description()  # type: ignore[no-untyped-call]
"""The SDK's default sampler as it describes itself (ParentBased's method is untyped)."""


class SpanIds:
    """The ids an exchange's spans get: the trace (the app's, when it sent one), the parent
    the SERVER span names (the app's span, or none), and the two spans' own ids."""

    __slots__ = ("client", "parent", "server", "trace_id", "trace_state")

    def __init__(self, parent: SpanContext | None, told: TraceIds | None = None) -> None:
        """`told`: the ids the upstream was sent (`--otel-propagate`), read from the same
        context as `parent`, so of the same trace."""
        if parent is not None and not parent.is_valid:
            parent = None
        self.parent = parent
        self.trace_state = parent.trace_state if parent is not None else TraceState()
        if told is not None:
            self.trace_id, self.client = told.trace_id, told.client_span_id
        else:
            self.trace_id = parent.trace_id if parent is not None else _IDS.generate_trace_id()
            self.client = _IDS.generate_span_id()
        self.server = _IDS.generate_span_id()


def remote_parent(context: Context | None) -> SpanContext | None:
    """The app's span an extracted context names, if any."""
    if context is None:
        return None
    found = trace.get_current_span(context).get_span_context()
    return found if found.is_valid else None


class Emitter:
    """Makes the SERVER span and its CLIENT child of one exchange and ends them into the
    processors (the queue's gate before the batch processor)."""

    def __init__(
        self,
        resource: Resource,
        scope: InstrumentationScope,
        sampler: Sampler,
        processors: Sequence[SpanProcessor],
        value_length: int,
    ) -> None:
        self.value_length = value_length
        """Characters of a string attribute kept (ollama_tap/otel/export.py: the SDK's
        SpanLimits)."""
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
        name = name[:NAME_LENGTH]
        text = text_size([name])
        server_size = bound(server_attributes, self.value_length) + text
        client_size = bound(client_attributes, self.value_length) + text
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
        made = (
            self._span(name, client, server, SpanKind.CLIENT, client_attributes, (), status,
                       times, client_size),
            self._span(name, server, ids.parent, SpanKind.SERVER, server_attributes,
                       [Event(event, None, at) for event, at in events], status, times,
                       server_size),
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
        text: int,
    ) -> ReadableSpan:
        made = SizedSpan(
            name, context, parent, self.resource, attributes, events, (), kind, None, status,
            times[0], times[1], self.scope,
        )  # fmt: skip
        made.size = SPAN_OVERHEAD + text
        return made


class SizedSpan(ReadableSpan):
    """A finished span with its estimated bytes, which bound the export's queue and the
    size of each request (ollama_tap/otel/export.py)."""

    size: int


def _bytes(text: str) -> int:
    # UTF-8 takes at most 4 bytes a character; str.isascii is a flag lookup, not a scan.
    return len(text) if text.isascii() else 4 * len(text)


def text_size(values: Iterable[object]) -> int:
    """Estimated bytes of the strings among `values` (and in their tuples)."""
    size = 0
    for value in values:
        if isinstance(value, str):
            size += _bytes(value)
        elif isinstance(value, tuple):
            size += sum(_bytes(v) for v in value if isinstance(v, str))
    return size


def bound(attributes: dict[str, Any], length: int) -> int:
    """Cut every string value (and string in a tuple) to `length` characters, as the SDK's
    BoundedAttributes does for a Tracer's spans: the mapping's values are already of the
    types OTLP takes, so only the length is left to check. Returns the estimated bytes of
    the strings kept (`text_size`), counted in the same pass."""
    size = 0
    for key, value in attributes.items():
        if isinstance(value, str):
            if len(value) > length:
                value = attributes[key] = value[:length]
            size += _bytes(value)
        elif isinstance(value, tuple):
            if any(isinstance(v, str) and len(v) > length for v in value):
                value = attributes[key] = tuple(
                    v[:length] if isinstance(v, str) else v for v in value
                )
            size += text_size([value])
    return size

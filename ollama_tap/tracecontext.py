"""`--otel-propagate`: the request goes upstream with a `traceparent` naming the proxy's
CLIENT span (docs/opentelemetry.md, "Context propagation").

The HTTP/1 transport writes the head upstream as the request arrives, before its exchange
or any span exists, so the CLIENT span's id (and the trace's, when the app sent none) is
chosen here, with the head, kept with the request, and given to the spans at the exchange's
end (ollama_tap/otel/observer.py). The app's context is read once, here, by the SDK's
propagators (`OTEL_PROPAGATORS`), and the spans take that same context as their parent; the
header is written by the SDK's W3C propagator. Without the setting none of this runs and
nothing of OpenTelemetry is imported (`UpstreamTarget` picks its header source once); with
it, export is on, so the SDK is installed.

Neither the relay nor the otel package: both read it, and neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

import structlog
from yarl import URL

from ollama_tap.facts import TraceIds
from ollama_tap.ollama import routes

if TYPE_CHECKING:
    from opentelemetry.context import Context

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

log = structlog.get_logger("ollama_tap.tracecontext")


class Carries(Protocol):
    """A request as the transport holds it (ollama_tap.relay.incoming.Incoming)."""

    trace_ids: TraceIds | None

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def rel_url(self) -> URL: ...


def extract(headers: Mapping[str, str]) -> Context | None:
    """The app's context in `headers`, as the configured propagators read it (None when none
    of their fields is there, or when a propagator fails on what the client sent: its request
    goes on as if it had sent none)."""
    from opentelemetry import propagate

    fields = propagate.get_global_textmap().fields
    carrier = {k.lower(): v for k, v in headers.items() if k.lower() in fields}
    if not carrier:
        return None
    try:
        return propagate.extract(carrier)
    except Exception:
        log.warning("trace_context_unreadable", exc_info=True)
        return None


def ids_of(incoming: Carries) -> TraceIds:
    """The request's TraceIds, chosen the first time they are asked for: a retry, and the
    exchange made after an early send, get the same ones."""
    found = incoming.trace_ids
    if found is None:
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        ids = RandomIdGenerator()
        context = extract(incoming.headers)
        app = trace.get_current_span(context or Context()).get_span_context()
        if app.is_valid:
            trace_id, flags, state = app.trace_id, app.trace_flags, app.trace_state
        else:
            trace_id, flags = ids.generate_trace_id(), trace.TraceFlags(trace.TraceFlags.SAMPLED)
            state = trace.TraceState()
        client = trace.SpanContext(trace_id, ids.generate_span_id(), False, flags, state)
        found = incoming.trace_ids = TraceIds(context, client)
    return found


def spanned(raw_path: str) -> bool:
    """Whether the route gets spans: every inference and embedding one (as
    ollama_tap.otel.semconv maps them; tests/otel/test_propagate.py holds the two together)."""
    endpoint = routes.endpoint_of(raw_path)
    return endpoint in routes.INFERENCE_ENDPOINTS or endpoint in routes.EMBEDDING_ENDPOINTS


def as_sent(incoming: Carries) -> Iterable[tuple[str, str]]:
    """The client's headers, untouched (propagation off)."""
    return incoming.headers.items()


def propagated(incoming: Carries) -> list[tuple[str, str]]:
    """The client's headers with its `traceparent` replaced by the CLIENT span's (in its
    place, else last) and its `tracestate` by the one the app's context kept. A route that
    gets no span (`/api/tags`, `/api/pull`, ...) goes up as it came: there is no CLIENT span
    to name."""
    if not spanned(incoming.rel_url.raw_path):
        return list(incoming.headers.items())
    told = ids_of(incoming).headers()
    out: list[tuple[str, str]] = []
    sent = False
    for name, value in incoming.headers.items():
        lower = name.lower()
        if lower == TRACEPARENT:
            if not sent:
                out.append((name, told[TRACEPARENT]))
                sent = True
        elif lower != TRACESTATE:
            out.append((name, value))
    if not sent:
        out.append((TRACEPARENT, told[TRACEPARENT]))
    if TRACESTATE in told:
        out.append((TRACESTATE, told[TRACESTATE]))
    return out

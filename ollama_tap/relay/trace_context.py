"""`--otel-propagate`: the request goes upstream with a `traceparent` naming the proxy's
CLIENT span (docs/opentelemetry.md, "Context propagation").

The HTTP/1 transport writes the head upstream as the request arrives, before its exchange
or any span exists, so the CLIENT span's id (and the trace's, when the app sent none) is
chosen here, with the head, kept on the Incoming, and the spans are given it at the
exchange's end (ollama_tap/otel/observer.py). No OpenTelemetry package is needed: the header is
W3C Trace Context, parsed and written by hand. Without the setting none of this runs
(`UpstreamTarget` picks its header source once).
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterable
from typing import Final

from ollama_tap.ollama import routes
from ollama_tap.relay.incoming import Incoming
from ollama_tap.relay.trace_ids import TraceIds

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
_HEX: Final = frozenset(string.hexdigits.lower())


def _hex_id(text: str, width: int) -> int | None:
    if len(text) != width or not _HEX.issuperset(text):
        return None
    value = int(text, 16)
    return value or None  # all zeros is invalid


def parse_traceparent(value: str) -> tuple[int, str] | None:
    """The trace id and flags of a valid W3C `traceparent`, else None (version `ff` is
    invalid; a later version may add fields after the four)."""
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, trace, parent, flags = parts[:4]
    if len(parts) > 4 and version == "00":
        return None
    if not _HEX.issuperset(version + flags) or len(flags) != 2:
        return None
    trace_id = _hex_id(trace, 32)
    if trace_id is None or _hex_id(parent, 16) is None:
        return None
    return trace_id, flags


def random_id(bits: int) -> int:
    """A random non-zero id of `bits` bits, as the SDK's RandomIdGenerator makes them."""
    while not (found := random.getrandbits(bits)):
        pass
    return found


def ids_of(incoming: Incoming) -> TraceIds:
    """The request's TraceIds, chosen the first time they are asked for: a retry, and the
    exchange made after an early send, get the same ones."""
    found = incoming.trace_ids
    if found is None:
        headers = incoming.headers
        parent = parse_traceparent(headers.get(TRACEPARENT, ""))
        if parent is None:
            found = TraceIds(random_id(128), random_id(64), "01", None)
        else:
            found = TraceIds(parent[0], random_id(64), parent[1], headers.get(TRACESTATE))
        incoming.trace_ids = found
    return found


def spanned(raw_path: str) -> bool:
    """Whether the route gets spans: every inference and embedding one (as
    ollama_tap.otel.semconv maps them; tests/otel/test_propagate.py holds the two together)."""
    endpoint = routes.endpoint_of(raw_path)
    return endpoint in routes.INFERENCE_ENDPOINTS or endpoint in routes.EMBEDDING_ENDPOINTS


def as_sent(incoming: Incoming) -> Iterable[tuple[str, str]]:
    """The client's headers, untouched (propagation off)."""
    return incoming.headers.items()


def propagated(incoming: Incoming) -> list[tuple[str, str]]:
    """The client's headers with its `traceparent` replaced by the CLIENT span's (in its
    place, else last) and its `tracestate` kept only when its traceparent was valid. A
    route that gets no span (`/api/tags`, `/api/pull`, ...) goes up as it came: there is no
    CLIENT span to name."""
    if not spanned(incoming.rel_url.raw_path):
        return list(incoming.headers.items())
    ids = ids_of(incoming)
    out: list[tuple[str, str]] = []
    sent = False
    for name, value in incoming.headers.items():
        lower = name.lower()
        if lower == TRACEPARENT:
            if not sent:
                out.append((name, ids.traceparent()))
                sent = True
        elif lower != TRACESTATE:
            out.append((name, value))
    if not sent:
        out.append((TRACEPARENT, ids.traceparent()))
    if ids.tracestate:
        out.append((TRACESTATE, ids.tracestate))
    return out

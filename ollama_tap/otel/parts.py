"""One exchange's two spans as plain values, ready for the SDK (compiled with mypyc)."""

from __future__ import annotations

from typing import Any, Final

from ollama_tap.exchange import Exchange
from ollama_tap.names import recordable
from ollama_tap.ollama import NATIVE_GENERATION
from ollama_tap.ollama.payloads import json_object
from ollama_tap.otel import content, spans
from ollama_tap.otel import semconv as sc
from ollama_tap.otel.config import OtelConfig
from ollama_tap.otel.spans import Attributes, ContextLength, Spelling

PARAMETERS_BODY_CAP: Final = 64 * 1024
"""A compatibility request's body is parsed for its sampling parameters only up to this size
(outside `full` mode): at the end, on the loop, it must stay cheap."""


class SpanParts:
    """The SERVER span's and its CLIENT child's names, attributes, times and events."""

    __slots__ = ("client", "common", "error", "events", "name", "server", "times")

    def __init__(
        self,
        name: str,
        common: Attributes,
        server: Attributes,
        times: tuple[int, int],
        events: list[tuple[str, int]],
        error: str | None,
    ) -> None:
        self.name = name
        self.common = common
        """What both spans carry (and the GenAI metrics take as their attributes)."""
        self.server = server
        self.client = spans.client_attributes(common)
        self.times = times
        """Start and end, Unix ns."""
        self.events = events
        self.error = error
        """The failure's description for the span status; None when it went well."""


def request_object(ex: Exchange, config: OtelConfig) -> dict[str, Any] | None:
    """The request body's object, when the spans need it: its prompt (`full` mode), or a
    compatibility route's sampling parameters (native ones are in `options`, parsed)."""
    body = ex.request_body
    if body is None:
        return None
    if config.content:
        return json_object(body)
    if ex.endpoint in NATIVE_GENERATION or len(body) > PARAMETERS_BODY_CAP:
        return None
    return json_object(body)


def span_parts(
    ex: Exchange,
    config: OtelConfig,
    context_length: ContextLength | None,
    spelling: Spelling = recordable,
) -> SpanParts | None:
    """The spans of an ended inference or embedding exchange; None for any other route.
    `spelling` names the model as the records do (`ModelLabels.spelling`)."""
    operation = sc.operation_of(ex.endpoint)
    if operation is None or ex.ended is None:
        return None
    body = request_object(ex, config)
    full = config.content  # the recorder's privacy mode is `full`
    upstream = config.boxes.get(ex.box, config.upstream)
    common = spans.common(ex, operation, upstream, config.semconv, spelling)
    server = dict(common)
    server.update(spans.server_attributes(ex, body, context_length, full=full, spelling=spelling))
    if config.content and operation != sc.EMBEDDINGS:
        if body is not None:
            server.update(content.input_attributes(body))
        server.update(content.output_attributes(ex))
    error = None
    if sc.ERROR_TYPE in common:
        error = ex.error_message or str(common[sc.ERROR_TYPE])
    times = (spans.wall_ns(ex, ex.started), spans.wall_ns(ex, ex.ended))
    name = sc.span_name(operation, common.get(sc.REQUEST_MODEL))
    return SpanParts(name, common, server, times, spans.events(ex), error)

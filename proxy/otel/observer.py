"""OtelObserver: each inference and embedding exchange as a SERVER span with a CLIENT child.

Built once, at the exchange's end, with the times the Exchange recorded as explicit start,
end and event times: no per-token work, and nothing but an append to the batch processor's
queue on the loop per span.
"""

from __future__ import annotations

from typing import Any, Final

from opentelemetry import propagate
from opentelemetry.context import Context

from proxy.exchange import Exchange
from proxy.ollama import NATIVE_GENERATION
from proxy.ollama.payloads import json_object
from proxy.otel import content, spans
from proxy.otel import semconv as sc
from proxy.otel.config import OtelConfig
from proxy.otel.emit import SpanIds, remote_parent
from proxy.otel.export import Tracing
from proxy.otel.metrics import GenAiMetrics
from proxy.relay.trace_context import METADATA_KEY as TRACE_IDS

NAME: Final = "otel"
PARAMETERS_BODY_CAP: Final = 64 * 1024
"""A compatibility request's body is parsed for its sampling parameters only up to this size
(outside `full` mode): at the end, on the loop, it must stay cheap."""


def _carrier(headers: dict[str, str], fields: set[str]) -> dict[str, str]:
    """The propagation headers among the client's, by lower-case name (as the getter asks)."""
    return {k.lower(): v for k, v in headers.items() if k.lower() in fields}


class OtelObserver:
    """Exports exchanges as GenAI spans (docs/opentelemetry.md has the attribute mapping)."""

    name = NAME

    def __init__(
        self,
        config: OtelConfig,
        tracing: Tracing,
        metrics: GenAiMetrics | None = None,
        context_length: spans.ContextLength | None = None,
    ) -> None:
        self.config = config
        self.emitter = tracing.emitter
        self.metrics = metrics
        self.context_length = context_length
        self.fields = set(propagate.get_global_textmap().fields)

    def response(self, ex: Exchange) -> None:
        self._export(ex)

    def error(self, ex: Exchange) -> None:
        self._export(ex)

    def _body(self, ex: Exchange) -> dict[str, Any] | None:
        body = ex.request_body
        if body is None:
            return None
        if self.config.content:
            return json_object(body)
        if ex.endpoint in NATIVE_GENERATION or len(body) > PARAMETERS_BODY_CAP:
            return None  # native sampling parameters are in `options`, already parsed
        return json_object(body)

    def parent(self, ex: Exchange) -> Context | None:
        carrier = _carrier(ex.request_headers, self.fields)
        return propagate.extract(carrier) if carrier else None

    def _export(self, ex: Exchange) -> None:
        operation = sc.operation_of(ex.endpoint)
        if operation is None or ex.ended is None:
            return
        body = self._body(ex)
        common = spans.common(ex, operation, self.config.upstream, self.config.semconv)
        attrs = {**common, **spans.server_attributes(ex, body, self.context_length)}
        if self.config.content and operation != sc.EMBEDDINGS:
            if body is not None:
                attrs.update(content.input_attributes(body))
            attrs.update(content.output_attributes(ex))
        name = sc.span_name(operation, ex.model)
        context = self.parent(ex)
        times = (spans.wall_ns(ex, ex.started), spans.wall_ns(ex, ex.ended))
        error = None
        if sc.ERROR_TYPE in common:
            error = ex.error_message or str(common[sc.ERROR_TYPE])
        ids = SpanIds(remote_parent(context), ex.metadata.get(TRACE_IDS))
        client = spans.client_attributes(common)
        self.emitter.emit(name, ids, context, times, attrs, client, spans.events(ex), error)
        if self.metrics is not None:
            self.metrics.record(ex, common)

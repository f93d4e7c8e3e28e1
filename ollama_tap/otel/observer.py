"""OtelObserver: each inference and embedding exchange as a SERVER span with a CLIENT child.

Built once, at the exchange's end, with the times the Exchange recorded as explicit start,
end and event times: no per-token work, and nothing but an append to the batch processor's
queue on the loop per span.
"""

from __future__ import annotations

from typing import Final

from opentelemetry import propagate
from opentelemetry.context import Context

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.otel.config import OtelConfig
from ollama_tap.otel.emit import SpanIds, remote_parent
from ollama_tap.otel.export import Tracing
from ollama_tap.otel.metrics import GenAiMetrics
from ollama_tap.otel.parts import span_parts
from ollama_tap.otel.spans import ContextLength
from ollama_tap.relay.trace_ids import TraceIds

NAME: Final = "otel"


def _carrier(headers: dict[str, str], fields: set[str]) -> dict[str, str]:
    """The propagation headers among the client's, by lower-case name (as the getter asks)."""
    return {k.lower(): v for k, v in headers.items() if k.lower() in fields}


class OtelObserver:
    """Exports exchanges as GenAI spans (docs/opentelemetry.md has the attribute mapping)."""

    name = NAME
    phase = Phase.SINK

    def __init__(
        self,
        config: OtelConfig,
        tracing: Tracing,
        metrics: GenAiMetrics | None = None,
        context_length: ContextLength | None = None,
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

    def parent(self, ex: Exchange) -> Context | None:
        carrier = _carrier(ex.request_headers, self.fields)
        return propagate.extract(carrier) if carrier else None

    def _export(self, ex: Exchange) -> None:
        made = span_parts(ex, self.config, self.context_length)
        if made is None:
            return
        context = self.parent(ex)
        told = ex.propagated
        ids = SpanIds(remote_parent(context), told if isinstance(told, TraceIds) else None)
        self.emitter.emit(
            made.name, ids, context, made.times, made.server, made.client, made.events,
            made.error,
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.record(ex, made.common)

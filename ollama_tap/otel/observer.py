"""OtelObserver: each inference and embedding exchange as a SERVER span with a CLIENT child.

Built once, at the exchange's end, with the times the Exchange recorded as explicit start,
end and event times: no per-token work, and nothing but an append to the batch processor's
queue on the loop per span.
"""

from __future__ import annotations

from typing import Final

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.names import recordable
from ollama_tap.otel.config import OtelConfig
from ollama_tap.otel.emit import SpanIds, remote_parent
from ollama_tap.otel.export import Tracing
from ollama_tap.otel.metrics import GenAiMetrics
from ollama_tap.otel.parts import span_parts
from ollama_tap.otel.spans import ContextLength, Spelling
from ollama_tap.tracecontext import extract

NAME: Final = "otel"


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
        spelling: Spelling = recordable,
    ) -> None:
        self.config = config
        self.emitter = tracing.emitter
        self.metrics = metrics
        self.context_length = context_length
        self.spelling = spelling
        """The model as the records name it (`ModelLabels.spelling`)."""

    def response(self, ex: Exchange) -> None:
        self._export(ex)

    def error(self, ex: Exchange) -> None:
        self._export(ex)

    def _export(self, ex: Exchange) -> None:
        made = span_parts(ex, self.config, self.context_length, self.spelling)
        if made is None:
            return
        # With --otel-propagate the relay read the app's context as the request came
        # (ollama_tap/tracecontext.py): the spans take that one, not a second reading.
        told = ex.propagated
        context = told.context if told is not None else extract(ex.request_headers)
        ids = SpanIds(remote_parent(context), told)
        self.emitter.emit(
            made.name, ids, context, made.times, made.server, made.client, made.events,
            made.error,
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.record(ex, made.common)

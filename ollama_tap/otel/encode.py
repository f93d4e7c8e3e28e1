"""The SDK's finished spans as one OTLP request body (ollama_tap/otel/wire.py), and the HTTP
exporter that sends that body through the SDK's own client."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import structlog
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope as Scope
from opentelemetry.trace import SpanKind, StatusCode

from ollama_tap.otel import wire

log = structlog.get_logger("ollama_tap.otel")


_KINDS: Final = {kind: kind.value + 1 for kind in SpanKind}
"""The SDK counts span kinds from INTERNAL = 0, OTLP from UNSPECIFIED = 0."""
_CODES: Final = {code: code.value for code in StatusCode}
TOO_LARGE: Final = 413
"""HTTP's Content Too Large: the collector's request-size limit (20 MiB by default)."""


def request_body(spans: Sequence[ReadableSpan]) -> bytes:
    """The ExportTraceServiceRequest of a batch, spans grouped by resource and scope in the
    order they came. Grouped by identity, not equality as the SDK's encoder does: a
    Resource hashes by serializing its attributes to JSON, once per span, and every span
    here shares one Resource and one scope object anyway."""
    groups: dict[int, tuple[Resource, dict[int, tuple[Scope | None, list[wire.Message]]]]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        by_scope = groups.get(id(resource))
        if by_scope is None:
            by_scope = groups[id(resource)] = (resource, {})
        encoded = by_scope[1].get(id(scope))
        if encoded is None:
            encoded = by_scope[1][id(scope)] = (scope, [])
        encoded[1].append(wire.sdk_span(span, _KINDS, _CODES))
    body = bytearray()
    for resource, scopes in groups.values():
        made = [
            wire.scope_spans(
                (scope.name, scope.version) if scope is not None else ("", None),
                scope.schema_url if scope is not None else None,
                encoded,
            )
            for scope, encoded in scopes.values()
        ]
        body += wire.resource_spans(resource.attributes, resource.schema_url, made)
    return bytes(body)


class WireExporter(SpanExporter):
    """The SDK's OTLP/HTTP exporter with the request body written by ollama_tap/otel/wire.py:
    the SDK's encoder took five times the instructions (docs/opentelemetry.md, "What it
    costs"). The SDK still sends it, through the client its exporter holds (endpoint,
    headers, compression, certificates, timeout and retries as the OTEL_* variables set
    them), whose `export(bytes)` is not public API: an SDK whose exporter has no such client
    is asked to export as usual, its own encoder making the same request. A body over the
    collector's size limit is refused there (413, `refused_as_too_large`): the caller splits
    the batch (ollama_tap/otel/export.py, CountingExporter)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.refused_as_too_large = False
        """The last export failed with 413 Content Too Large (one export thread sets it)."""
        send = getattr(getattr(inner, "_client", None), "export", None)
        self._send: Callable[[bytes], Any] | None = send if callable(send) else None
        if self._send is None:
            log.info("otel_sdk_encoder", reason="the SDK's OTLP/HTTP exporter takes no body")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.refused_as_too_large = False
        send = self._send
        if send is None or getattr(self.inner, "_shutdown", False):
            return self.inner.export(spans)
        try:
            body = request_body(spans)
        except Exception:
            log.exception("otel_encode_failed")
            return SpanExportResult.FAILURE
        result = send(body)
        ok = getattr(result, "success", False)
        self.refused_as_too_large = getattr(result, "status_code", None) == TOO_LARGE
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

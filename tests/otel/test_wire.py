"""The request body ollama_tap/otel/wire.py writes decodes, with the official opentelemetry-proto
messages, to exactly what the SDK's own encoder makes of the same spans."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from ollama_tap.otel.emit import Emitter, SpanIds
from ollama_tap.otel.encode import WireExporter, request_body

RESOURCE = Resource({"service.name": "ollama-tap", "service.version": "1.2"}, "https://s/1")
OTHER = Resource({"service.name": "other"})
SCOPE = InstrumentationScope("ollama-tap", "1.2", "https://schema/1")
ATTRS = {
    "text": "é ✓ 𝄞",
    "yes": True,
    "no": False,
    "count": 7,
    "negative": -3,
    "big": 2**62,
    "ratio": 0.25,
    "reasons": ("stop", "length"),
    "empty": "",
}


def span(
    name: str,
    kind: SpanKind,
    *,
    parent: SpanContext | None = None,
    resource: Resource = RESOURCE,
    status: Status | None = None,
    events: Sequence[Event] = (),
    state: TraceState | None = None,
) -> ReadableSpan:
    context = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, False,
        TraceFlags(TraceFlags.SAMPLED), state or TraceState(),
    )  # fmt: skip
    return ReadableSpan(
        name, context, parent, resource, ATTRS, events, (), kind, None,
        status or Status(), 1_700_000_000_123_456_789, 1_700_000_001_000_000_000, SCOPE,
    )  # fmt: skip


def decoded(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(request_body(spans))


def sdk(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The SDK's request, with the empty Status the SDK always sends left out (an absent
    Status is the same unset status to every receiver)."""
    made = encode_spans(spans)
    for resource in made.resource_spans:
        for scope in resource.scope_spans:
            for one in scope.spans:
                if not one.status.code and not one.status.message:
                    one.ClearField("status")
    return made


def test_every_field_and_attribute_type_matches_the_sdks_encoding() -> None:
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, True)
    local = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x1111111111111111, False)
    spans = [
        span(
            "chat llama3.2", SpanKind.SERVER, parent=remote,
            events=[Event("first", {"n": 1}, 1_700_000_000_200_000_000), Event("bare", None, 5)],
            state=TraceState([("vendor", "v1"), ("other", "x")]),
        ),
        span("chat llama3.2", SpanKind.CLIENT, parent=local,
             status=Status(StatusCode.ERROR, "upstream_unreachable")),
        span("embeddings all-minilm", SpanKind.INTERNAL, status=Status(StatusCode.OK)),
        span("on another resource", SpanKind.CONSUMER, resource=OTHER),
    ]  # fmt: skip
    assert decoded(spans) == sdk(spans)
    server = decoded(spans).resource_spans[0].scope_spans[0].spans[0]
    assert server.parent_span_id == bytes.fromhex("00f067aa0ba902b7")
    assert server.flags == 0x300  # has is-remote, is remote
    assert [kv.key for kv in server.attributes] == list(ATTRS)


def test_an_empty_batch_is_an_empty_request() -> None:
    assert request_body([]) == b""
    assert decoded([]) == encode_spans([])


class Recorded:
    """An exporter's client as the SDK's HTTP exporter holds one: bodies in, a result out."""

    def __init__(self, success: bool) -> None:
        self.success = success
        self.bodies: list[bytes] = []

    def export(self, data: bytes) -> Recorded:
        self.bodies.append(data)
        return self


class Plain(SpanExporter):
    """An exporter with no client to hand a body to: the wrapper must let it export."""

    def __init__(self) -> None:
        self.batches: list[Sequence[ReadableSpan]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append(spans)
        return SpanExportResult.SUCCESS


def test_the_body_goes_to_the_sdks_client_and_its_result_is_the_exports() -> None:
    for success, expected in ((True, SpanExportResult.SUCCESS), (False, SpanExportResult.FAILURE)):
        inner = Plain()
        client = inner._client = Recorded(success)  # type: ignore[attr-defined]
        spans = [span("chat x", SpanKind.SERVER)]
        assert WireExporter(inner).export(spans) is expected
        assert client.bodies == [request_body(spans)] and inner.batches == []


def test_an_exporter_without_a_client_exports_as_the_sdk_does() -> None:
    inner = Plain()
    spans = [span("chat x", SpanKind.SERVER)]
    assert WireExporter(inner).export(spans) is SpanExportResult.SUCCESS
    assert inner.batches == [spans]


def test_the_installed_sdks_http_exporter_takes_an_encoded_body() -> None:
    """Else every export falls back to the SDK's encoder: correct, but the cost measured in
    docs/opentelemetry.md would no longer hold."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    assert WireExporter(OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces"))._send


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


@pytest.mark.parametrize("error", [None, "upstream_unreachable"])
@pytest.mark.parametrize(
    "parent",
    [
        None,
        SpanContext(
            0x0AF7651916CD43DD8448EB211C80319C,
            0x00F067AA0BA902B7,
            True,
            TraceFlags(1),
            TraceState([("v", "1")]),
        ),
    ],
)
def test_the_emitters_spans_encode_as_the_sdk_encodes_them(
    error: str | None, parent: SpanContext | None
) -> None:
    """The spans the emitter builds whole, not through a Tracer."""
    collect = Collect()
    emitter = Emitter(RESOURCE, SCOPE, DEFAULT_ON, [collect], 1024)
    sent = emitter.emit(
        "chat llama3.2", SpanIds(parent), None, (1_700_000_000_000_000_000, 1_700_000_001_0),
        {**ATTRS, "server.only": 1}, {"gen_ai.operation.name": "chat"},
        [("ollama_tap.first_token", 1_700_000_000_500_000_000)], error,
    )  # fmt: skip
    assert sent and len(collect.spans) == 2
    assert decoded(collect.spans) == sdk(collect.spans)

"""OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the same spans over OTLP/gRPC to a gRPC receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import ollama
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import MakeProxy
from tests.support.metrics import LLAMA, MESSAGES
from tests.support.waiting import eventually


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Span] = []

    async def Export(
        self, request: ExportTraceServiceRequest, context: object
    ) -> ExportTraceServiceResponse:
        for rs in request.resource_spans:
            for scope in rs.scope_spans:
                self.spans.extend(scope.spans)
        return ExportTraceServiceResponse()


@pytest_asyncio.fixture
async def grpc_receiver() -> AsyncIterator[tuple[Traces, int]]:
    server = grpc.aio.server()
    traces = Traces()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield traces, port
    await server.stop(None)


async def test_spans_go_over_grpc_when_the_protocol_says_so(
    proxy_factory: MakeProxy,
    grpc_receiver: tuple[Traces, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces, port = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    proxy = await proxy_factory(otlp_endpoint=f"http://127.0.0.1:{port}")
    await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages=MESSAGES, stream=False)
    await eventually(lambda: len(traces.spans) == 2)
    kinds = {s.kind: s for s in traces.spans}
    assert kinds.keys() == {Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT}
    assert kinds[Span.SPAN_KIND_CLIENT].parent_span_id == kinds[Span.SPAN_KIND_SERVER].span_id
    assert {s.name for s in traces.spans} == {f"chat {LLAMA}"}

"""A test OTLP/HTTP receiver: decodes what the proxy exports with the official proto messages.

It keeps each request's raw bytes (a privacy test searches them) and the decoded spans and
metrics; `hang` makes it hold every request until released (a slow collector), `limit`
refuses large bodies (a collector's request-size limit).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.waiting import eventually

PROTOBUF = "application/x-protobuf"


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(item) for item in v.array_value.values)
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        out[pair.key] = value_of(pair.value)
    return out


@dataclass
class Received:
    """One span as exported, with its resource's attributes."""

    span: Span
    resource: dict[str, Any]

    @property
    def attrs(self) -> dict[str, Any]:
        return attributes(self.span.attributes)

    @property
    def events(self) -> dict[str, int]:
        return {e.name: e.time_unix_nano for e in self.span.events}

    @property
    def seconds(self) -> float:
        return (self.span.end_time_unix_nano - self.span.start_time_unix_nano) / 1e9


@dataclass
class Receiver:
    """An OTLP/HTTP collector stand-in (`/v1/traces`, `/v1/metrics`)."""

    url: str = ""
    raw: list[bytes] = field(default_factory=list)
    spans: list[Received] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    hang: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    """Requests being held now (`hang`)."""
    refuse_metrics: bool = False
    """Answer every metrics export 400 (a collector that takes no metrics)."""
    limit: int | None = None
    """Bodies above this many bytes are refused with 413, as the Collector's OTLP/HTTP
    receiver refuses those over its `max_request_body_size` (20 MiB by default)."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        return app

    async def _held(self, request: web.Request) -> bytes:
        body = await request.read()
        self.headers.append(dict(request.headers))
        if self.hang:
            self.held += 1
            try:
                await self.released.wait()
            finally:
                self.held -= 1
        return body

    async def _traces(self, request: web.Request) -> web.Response:
        body = await self._held(request)
        if self.limit is not None and len(body) > self.limit:
            return web.Response(status=413, text="request body too large")
        self.raw.append(body)
        message = ExportTraceServiceRequest.FromString(body)
        for rs in message.resource_spans:
            resource = attributes(rs.resource.attributes)
            for scope in rs.scope_spans:
                self.spans.extend(Received(span, resource) for span in scope.spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type=PROTOBUF)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await self._held(request)
        if self.refuse_metrics:
            return web.Response(status=400, text="metrics are not taken here")
        message = ExportMetricsServiceRequest.FromString(body)
        for rm in message.resource_metrics:
            for scope in rm.scope_metrics:
                self.metrics.extend(scope.metrics)
        reply = ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type=PROTOBUF)

    def of_kind(self, kind: int) -> list[Received]:
        return [r for r in self.spans if r.span.kind == kind]

    @property
    def servers(self) -> list[Received]:
        return self.of_kind(Span.SPAN_KIND_SERVER)

    @property
    def clients(self) -> list[Received]:
        return self.of_kind(Span.SPAN_KIND_CLIENT)


async def spans_of(receiver: Receiver, count: int) -> None:
    """Wait until `count` exchanges' spans (a SERVER span and its CLIENT child) arrived."""
    await eventually(lambda: len(receiver.servers) >= count and len(receiver.clients) >= count)

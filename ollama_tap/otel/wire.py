"""OTLP trace requests in protobuf's wire format, written directly (compiled with mypyc).

The SDK's encoder builds a protobuf message object for every span, attribute and value
before serializing them, which made the export thread's share of an exchange three times
the loop's (docs/opentelemetry.md, "What it costs"). This writes the same
`ExportTraceServiceRequest` bytes: each message as a list of byte strings joined once, with
every length counted as the parts are added (a nested message's length must precede it),
each attribute key's encoding kept, and the one-byte varints made once. tests/otel decode the
result with the official opentelemetry-proto messages. Field numbers are those of
opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto (v1.x, stable).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

_DOUBLE: Final = struct.Struct("<d")
_FIXED64: Final = struct.Struct("<Q")
_FIXED32: Final = struct.Struct("<I")
_KEYS_KEPT: Final = 1024
"""Attribute keys whose encoding is kept (ours are a few dozen; a bound all the same)."""

FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200
"""SpanFlags bits: the span says whether its parent is remote, and that it is."""

_SMALL: Final = [bytes((n,)) for n in range(0x80)]
"""The one-byte varints (and so every one-byte tag)."""
_keys: dict[str, bytes] = {}
"""Attribute key → its KeyValue.key field and the tag of KeyValue.value that follows it."""


def varint(n: int) -> bytes:
    """An unsigned varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Message:
    """One message's fields as parts, and their length so far."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)

    def field(self, tag: int, data: bytes) -> None:
        """A length-delimited field (string, bytes) with a one-byte tag."""
        length = varint(len(data))
        parts = self.parts
        parts.append(_SMALL[tag])
        parts.append(length)
        parts.append(data)
        self.size += 1 + len(length) + len(data)

    def nested(self, tag: int, inner: Message) -> None:
        """An embedded message with a one-byte tag."""
        length = varint(inner.size)
        self.parts.append(_SMALL[tag])
        self.parts.append(length)
        self.parts += inner.parts
        self.size += 1 + len(length) + inner.size

    def attributes(self, tag: int, attrs: Mapping[str, object]) -> None:
        """Each attribute as a KeyValue in the repeated field of one-byte tag `tag`."""
        parts = self.parts
        for key, value in attrs.items():
            name = _keys.get(key)
            if name is None:
                name = _key(key)
            encoded = any_value(value)
            value_length = varint(len(encoded))
            kv_size = len(name) + len(value_length) + len(encoded)
            kv_length = varint(kv_size)
            parts.append(_SMALL[tag])
            parts.append(kv_length)
            parts.append(name)
            parts.append(value_length)
            parts.append(encoded)
            self.size += 1 + len(kv_length) + kv_size

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _key(key: str) -> bytes:
    encoded = key.encode("utf-8", "surrogatepass")
    made = b"\x0a" + varint(len(encoded)) + encoded + b"\x12"
    if len(_keys) < _KEYS_KEPT:
        _keys[key] = made
    return made


def any_value(value: object) -> bytes:
    """An AnyValue; a value of a type OTLP has no slot for is sent as its text."""
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        return b"\x0a" + varint(len(data)) + data
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return b"\x3a" + varint(len(value)) + value
    if isinstance(value, (list, tuple)):
        items = Message()
        for item in value:
            items.field(0x0A, any_value(item))
        return b"\x2a" + varint(items.size) + items.bytes()
    return any_value(str(value))


def _text(data: str) -> bytes:
    return data.encode("utf-8", "surrogatepass")


def _span(
    ids: tuple[int, int, int],
    remote_parent: bool,
    trace_state: str,
    name: str,
    kind: int,
    times: tuple[int, int],
    attrs: Mapping[str, object],
    events: Iterable[tuple[str, int, Mapping[str, object]]],
    status: tuple[int, str | None],
) -> Message:
    """One Span message: `ids` are (trace, span, parent; 0 for none), `kind` the OTLP
    SpanKind number, `times` Unix ns, `events` (name, Unix ns, attributes), `status`
    (OTLP code, message)."""
    trace_id, span_id, parent_id = ids
    out = Message()
    out.field(0x0A, trace_id.to_bytes(16, "big"))
    out.field(0x12, span_id.to_bytes(8, "big"))
    if trace_state:
        out.field(0x1A, _text(trace_state))
    if parent_id:
        out.field(0x22, parent_id.to_bytes(8, "big"))
    out.field(0x2A, _text(name))
    if kind:
        out.add(b"\x30")
        out.add(varint(kind))
    out.add(b"\x39" + _FIXED64.pack(times[0]) + b"\x41" + _FIXED64.pack(times[1]))
    out.attributes(0x4A, attrs)
    for event_name, at, event_attrs in events:
        event = Message()
        event.add(b"\x09" + _FIXED64.pack(at))
        event.field(0x12, _text(event_name))
        event.attributes(0x1A, event_attrs)
        out.nested(0x5A, event)
    code, message = status
    if code or message:
        status_msg = Message()
        if message:
            status_msg.field(0x12, _text(message))
        status_msg.add(b"\x18")
        status_msg.add(varint(code))
        out.nested(0x7A, status_msg)
    flags = FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if remote_parent else 0)
    out.add(b"\x85\x01" + _FIXED32.pack(flags))
    return out


def sdk_span(span: Any, kinds: Mapping[Any, int], codes: Mapping[Any, int]) -> Message:
    """A finished SDK span (a ReadableSpan, read by attribute: this module imports no SDK)
    as a Span message; `kinds` and `codes` map the SDK's SpanKind and StatusCode to OTLP's
    numbers (ollama_tap/otel/encode.py). Here rather than beside the SDK's types so that it runs
    compiled: it is most of an export's work per span."""
    context, parent = span.context, span.parent
    if context is None:
        raise ValueError("a finished span without a context")
    state = context.trace_state
    status = span.status
    return _span(
        (context.trace_id, context.span_id, parent.span_id if parent is not None else 0),
        parent is not None and bool(parent.is_remote),
        ",".join([f"{k}={v}" for k, v in state.items()]) if state else "",
        span.name,
        kinds[span.kind],
        (span.start_time or 0, span.end_time or 0),
        span.attributes or {},
        [(e.name, e.timestamp, e.attributes or {}) for e in span.events],
        (codes[status.status_code], status.description),
    )


def _group(head: Message, members: Sequence[Message], schema_url: str | None) -> Message:
    """ScopeSpans and ResourceSpans alike: what they are about (field 1), their members
    (field 2, repeated), their schema URL (field 3)."""
    out = Message()
    out.nested(0x0A, head)
    for one in members:
        out.nested(0x12, one)
    if schema_url:
        out.field(0x1A, _text(schema_url))
    return out


def scope_spans(
    scope: tuple[str, str | None], schema_url: str | None, spans: Sequence[Message]
) -> Message:
    """A ScopeSpans message: the instrumentation scope (name, version) and its spans."""
    name, version = scope
    scope_msg = Message()
    scope_msg.field(0x0A, _text(name))
    if version:
        scope_msg.field(0x12, _text(version))
    return _group(scope_msg, spans, schema_url)


def resource_spans(
    resource_attrs: Mapping[str, object], schema_url: str | None, scopes: Sequence[Message]
) -> bytes:
    """A ResourceSpans message, as field 1 of an ExportTraceServiceRequest: concatenated,
    several of these are one request."""
    resource = Message()
    resource.attributes(0x0A, resource_attrs)
    request = Message()
    request.nested(0x0A, _group(resource, scopes, schema_url))
    return request.bytes()

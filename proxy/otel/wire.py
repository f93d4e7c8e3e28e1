"""OTLP trace requests in protobuf's wire format, written directly (compiled with mypyc).

The SDK's encoder builds a protobuf message object for every span, attribute and value
before serializing them: about 47 µs a span here, on the export thread, which alone came
close to the export's whole budget (docs/opentelemetry.md, "What it costs"). This writes the
same `ExportTraceServiceRequest` bytes field by field, with each attribute key's encoding
kept, for a fraction of that; tests/otel decode them with the official opentelemetry-proto
messages. Field numbers are those of opentelemetry/proto/trace/v1/trace.proto and
common/v1/common.proto (v1.x, stable).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

_DOUBLE: Final = struct.Struct("<d")
_FIXED64: Final = struct.Struct("<Q")
_FIXED32: Final = struct.Struct("<I")
_KEYS_KEPT: Final = 1024
"""Attribute keys whose encoding is kept (ours are a few dozen; a bound all the same)."""

FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200
"""SpanFlags bits: the span says whether its parent is remote, and that it is."""

_keys: dict[str, bytes] = {}


def varint(n: int) -> bytes:
    """An unsigned varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): string, bytes or an embedded message."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode("utf-8", "surrogatepass"))


def any_value(value: object) -> bytes:
    """An AnyValue's fields; a value of a type OTLP has no slot for is sent as its text."""
    if isinstance(value, str):
        return _text(1, value)
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, list | tuple):
        items = b"".join(_field(1, any_value(item)) for item in value)
        return _field(5, items)
    return _text(1, str(value))


def _key(key: str) -> bytes:
    kept = _keys.get(key)
    if kept is None:
        kept = _text(1, key)
        if len(_keys) < _KEYS_KEPT:
            _keys[key] = kept
    return kept


def attributes(number: int, attrs: Mapping[str, object]) -> bytes:
    """Each attribute as a KeyValue in repeated field `number`."""
    out = bytearray()
    for key, value in attrs.items():
        out += _field(number, _key(key) + _field(2, any_value(value)))
    return bytes(out)


def span(
    ids: tuple[int, int, int],
    remote_parent: bool,
    trace_state: str,
    name: str,
    kind: int,
    times: tuple[int, int],
    attrs: Mapping[str, object],
    events: Iterable[tuple[str, int, Mapping[str, object]]],
    status: tuple[int, str | None],
) -> bytes:
    """One Span message: `ids` are (trace, span, parent; 0 for none), `kind` the OTLP
    SpanKind number, `times` Unix ns, `events` (name, Unix ns, attributes), `status`
    (OTLP code, message)."""
    trace_id, span_id, parent_id = ids
    out = bytearray(_field(1, trace_id.to_bytes(16, "big")))
    out += _field(2, span_id.to_bytes(8, "big"))
    if trace_state:
        out += _text(3, trace_state)
    if parent_id:
        out += _field(4, parent_id.to_bytes(8, "big"))
    out += _text(5, name)
    if kind:
        out += b"\x30" + varint(kind)
    out += b"\x39" + _FIXED64.pack(times[0]) + b"\x41" + _FIXED64.pack(times[1])
    out += attributes(9, attrs)
    for event_name, at, event_attrs in events:
        event = b"\x09" + _FIXED64.pack(at) + _text(2, event_name)
        out += _field(11, event + attributes(3, event_attrs))
    code, message = status
    if code or message:
        out += _field(15, (_text(2, message) if message else b"") + b"\x18" + varint(code))
    flags = FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if remote_parent else 0)
    out += b"\x85\x01" + _FIXED32.pack(flags)
    return bytes(out)


def scope_spans(
    scope: tuple[str, str | None], schema_url: str | None, spans: Sequence[bytes]
) -> bytes:
    """A ScopeSpans message: the instrumentation scope (name, version) and its spans."""
    name, version = scope
    scope_msg = _text(1, name) + (_text(2, version) if version else b"")
    out = bytearray(_field(1, scope_msg))
    for one in spans:
        out += _field(2, one)
    if schema_url:
        out += _text(3, schema_url)
    return bytes(out)


def resource_spans(
    resource_attrs: Mapping[str, object], schema_url: str | None, scopes: Sequence[bytes]
) -> bytes:
    """A ResourceSpans message, as field 1 of an ExportTraceServiceRequest: concatenated,
    several of these are one request."""
    out = bytearray(_field(1, attributes(1, resource_attrs)))
    for one in scopes:
        out += _field(2, one)
    if schema_url:
        out += _text(3, schema_url)
    return _field(1, bytes(out))

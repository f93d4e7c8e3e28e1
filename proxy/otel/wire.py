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
_SMALL: Final = [bytes((n,)) for n in range(0x80)]
"""The one-byte varints, made once: most lengths and every tag here are one."""


def _put(out: bytearray, n: int) -> None:
    """Append an unsigned varint."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def varint(n: int) -> bytes:
    """An unsigned varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    _put(out, n)
    return bytes(out)


def _put_field(out: bytearray, tag: int, payload: bytes | bytearray) -> None:
    """Append a length-delimited field (wire type 2) whose one-byte tag is `tag`."""
    out.append(tag)
    _put(out, len(payload))
    out += payload


def _field(number: int, payload: bytes | bytearray) -> bytes:
    out = bytearray()
    _put_field(out, number << 3 | 2, payload)
    return bytes(out)


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
        items = bytearray()
        for item in value:
            _put_field(items, 0x0A, any_value(item))
        return _field(5, items)
    return _text(1, str(value))


def _key(key: str) -> bytes:
    kept = _keys.get(key)
    if kept is None:
        kept = _text(1, key)
        if len(_keys) < _KEYS_KEPT:
            _keys[key] = kept
    return kept


def _size(n: int) -> int:
    """The bytes of `n` as an unsigned varint."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _put_attributes(out: bytearray, tag: int, attrs: Mapping[str, object]) -> None:
    """Each attribute as a KeyValue in the repeated field of one-byte tag `tag`."""
    for key, value in attrs.items():
        name, encoded = _key(key), any_value(value)
        out.append(tag)
        _put(out, len(name) + 1 + _size(len(encoded)) + len(encoded))
        out += name
        out.append(0x12)
        _put(out, len(encoded))
        out += encoded


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
    out = bytearray()
    _put_field(out, 0x0A, trace_id.to_bytes(16, "big"))
    _put_field(out, 0x12, span_id.to_bytes(8, "big"))
    if trace_state:
        _put_field(out, 0x1A, trace_state.encode())
    if parent_id:
        _put_field(out, 0x22, parent_id.to_bytes(8, "big"))
    _put_field(out, 0x2A, name.encode("utf-8", "surrogatepass"))
    if kind:
        out.append(0x30)
        _put(out, kind)
    out.append(0x39)
    out += _FIXED64.pack(times[0])
    out.append(0x41)
    out += _FIXED64.pack(times[1])
    _put_attributes(out, 0x4A, attrs)
    for event_name, at, event_attrs in events:
        event = bytearray(b"\x09")
        event += _FIXED64.pack(at)
        _put_field(event, 0x12, event_name.encode("utf-8", "surrogatepass"))
        _put_attributes(event, 0x1A, event_attrs)
        _put_field(out, 0x5A, event)
    code, message = status
    if code or message:
        status_msg = bytearray(_text(2, message) if message else b"")
        status_msg.append(0x18)
        _put(status_msg, code)
        _put_field(out, 0x7A, status_msg)
    flags = FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if remote_parent else 0)
    out += b"\x85\x01"
    out += _FIXED32.pack(flags)
    return bytes(out)


def scope_spans(
    scope: tuple[str, str | None], schema_url: str | None, spans: Sequence[bytes]
) -> bytes:
    """A ScopeSpans message: the instrumentation scope (name, version) and its spans."""
    name, version = scope
    scope_msg = _text(1, name) + (_text(2, version) if version else b"")
    out = bytearray()
    _put_field(out, 0x0A, scope_msg)
    for one in spans:
        _put_field(out, 0x12, one)
    if schema_url:
        _put_field(out, 0x1A, schema_url.encode())
    return bytes(out)


def resource_spans(
    resource_attrs: Mapping[str, object], schema_url: str | None, scopes: Sequence[bytes]
) -> bytes:
    """A ResourceSpans message, as field 1 of an ExportTraceServiceRequest: concatenated,
    several of these are one request."""
    resource = bytearray()
    _put_attributes(resource, 0x0A, resource_attrs)
    out = bytearray()
    _put_field(out, 0x0A, resource)
    for one in scopes:
        _put_field(out, 0x12, one)
    if schema_url:
        _put_field(out, 0x1A, schema_url.encode())
    return _field(1, out)

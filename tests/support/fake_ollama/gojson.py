"""Go's encoding/json and time formatting, byte for byte, as Ollama's replies are printed."""

from __future__ import annotations

import json
import math
import struct
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any


class F32(float):
    """A number Go holds as float32 (embeddings): printed with float32's shortest digits."""


def f32(value: float) -> F32:
    """Round to the nearest float32, as a Go float32 conversion does."""
    return F32(struct.unpack("<f", struct.pack("<f", value))[0])


def go_json(value: Any) -> bytes:
    """Serialize like Go's json.Marshal: compact, in the given key order, `<>&` escaped."""
    return _encode(value).encode()


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value, 32 if isinstance(value, F32) else 64)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_go_string(k)}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__}")


_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _go_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).translate(_GO_ESCAPES)


def _go_float(value: float, bits: int) -> str:
    digits = Decimal(_shortest_f32(value) if bits == 32 else repr(value)).normalize()
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        return format(digits, "f")
    # Go's 'e' form: shortest mantissa, exponent without a leading zero (e-07 becomes e-7).
    sign, numerals, exponent = digits.as_tuple()
    text = "".join(map(str, numerals))
    power = len(text) - 1 + int(exponent)
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    exp = f"{'-' if power < 0 else '+'}{abs(power):02d}" if power >= 0 else f"-{abs(power)}"
    return f"{'-' if sign else ''}{mantissa}e{exp}"


def _shortest_f32(value: float) -> str:
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if f32(float(text)) == value:
            return text
    return repr(value)


def go_time(epoch_ns: int, *, local: bool = False) -> str:
    """RFC3339Nano as Go prints it: trailing zeros of the fraction dropped, `Z` for UTC."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if local:
        moment = moment.astimezone()
    offset = int((moment.utcoffset() or timedelta(0)).total_seconds()) // 60
    zone = (
        "Z"
        if offset == 0
        else f"{'+' if offset > 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    )
    fraction = f".{nanos:09d}".rstrip("0").rstrip(".")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + zone


def epoch_ns(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def sorted_map(value: Any) -> Any:
    """Go prints map[string]any keys sorted, at every depth."""
    if isinstance(value, dict):
        return {k: sorted_map(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_map(v) for v in value]
    return value

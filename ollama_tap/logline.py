"""How a log event reads on a terminal: one short line, the fields a person acts on.

JSON logs (a pipe, a file, a collector) keep every field of every event; these processors
run only before the console renderer (ollama_tap/logs.py). On a terminal an ordinary
exchange is one line of at most 120 columns: a field that says nothing (None, empty) is
left out, the route template is left out when it is the path itself, a digest is cut to
the 12 characters Ollama's own `ollama ps` prints, durations and sizes carry their units,
the request's size and a reply that stopped as asked are left to JSON, the id is the short
form `records show` accepts, and the peer address is shown only when it is not this
machine (on one box every app is 127.0.0.1, so the client's name is what tells them
apart).
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any, Final

DIGEST: Final = re.compile(r"\b(sha256[:-])?([0-9a-f]{12})[0-9a-f]{52}\b")
"""A 64-hex digest, with or without its algorithm: kept to its first 12 hex digits."""
LOOPBACK: Final = ("127.", "::1", "::ffff:127.")
ORDINARY_END: Final = "stop"
"""The done reason of a reply that ended as asked: not worth a field on a terminal."""

EventDict = MutableMapping[str, Any]


def _ms(value: Any) -> str | None:
    if not isinstance(value, int | float):
        return None
    if value < 1:
        return f"{value * 1000:.0f}µs"
    if value < 1000:
        return f"{value:.0f}ms"
    return f"{value / 1000:.2f}s" if value < 60_000 else f"{value / 60_000:.1f}min"


def _bytes(value: Any) -> str | None:
    if not isinstance(value, int) or not value:
        return None
    if value < 1024:
        return f"{value}B"
    if value < 1024 * 1024:
        return f"{value / 1024:.1f}KiB"
    return f"{value / 1024 / 1024:.1f}MiB"


def _local(address: Any) -> bool:
    return not isinstance(address, str) or not address or address.startswith(LOOPBACK)


def short_id(exchange_id: str) -> str:
    """`738b6b15c281-00000012` as `738b6b15c281-12`: the form `records list` prints and
    `records show` accepts."""
    run, dash, count = exchange_id.rpartition("-")
    return f"{run}-{int(count)}" if dash and count.isdigit() else exchange_id


def _exchange(event: EventDict) -> EventDict:
    """The access log's exchange as `code-helper POST /api/chat llama3.2:latest 200 ok
    2.94s` (`llama3.2:latest→gpu2` among several boxes), then what varies, then the id."""
    path = event.pop("path", None) or event.get("endpoint") or ""
    endpoint = event.pop("endpoint", None)
    if endpoint and endpoint != path:
        event["route"] = endpoint
    took = _ms(event.pop("duration_ms", None))
    box = event.pop("box", None)  # several boxes: `llama3.2:latest→gpu2`
    model = event.pop("model", None)
    model = f"{model or ''}→{box}" if box else model
    head = (
        event.pop("client", None), event.pop("method", None), path, model,
        event.pop("status", None), event.pop("outcome", None), took,
    )  # fmt: skip
    event["event"] = " ".join(str(part) for part in head if part not in (None, ""))
    address = event.pop("address", None)
    if not _local(address):
        event["from"] = address
    event["ttft"] = _ms(event.pop("ttft_ms", None))
    event.pop("bytes_in", None)
    event["out"] = _bytes(event.pop("bytes_out", None))
    if event.get("done_reason") == ORDINARY_END:
        del event["done_reason"]
    ident = event.pop("id", None)
    event["id"] = short_id(ident) if isinstance(ident, str) else ident  # last: to copy
    return event


def for_terminal(logger: Any, method: str, event: EventDict) -> EventDict:
    """The structlog processor: the exchange line made short, every event's empty fields
    dropped and its digests cut."""
    if event.get("event") == "exchange" and "endpoint" in event:
        event = _exchange(event)
    for key in [k for k, v in event.items() if v is None or v == ""]:
        del event[key]
    for key, value in event.items():
        if isinstance(value, str) and len(value) >= 64:
            event[key] = DIGEST.sub(lambda m: (m[1] or "") + m[2], value)
    return event

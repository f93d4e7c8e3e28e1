"""Exports: JSONL (one stored record per line, round-trips) and HAR 1.2 (browser dev tools).

Exports read only what was stored, so the privacy mode the record was made under holds
in them too (no credential header can appear: none was ever stored). A record keeps no
Host, so HAR URLs use Ollama's default address.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, Any, Final
from urllib.parse import parse_qsl

import orjson

HAR_ORIGIN: Final = "http://localhost:11434"
_HEAVY: Final = frozenset(
    {"request", "response", "timeline", "context", "output", "thinking", "tool_calls"}
)


def write_jsonl(records: Iterable[dict[str, Any]], out: IO[bytes]) -> int:
    n = 0
    for record in records:
        out.write(orjson.dumps(record) + b"\n")
        n += 1
    return n


def _ms(seconds: float | None) -> float:
    return -1 if seconds is None else round(seconds * 1000, 3)


def _headers(part: dict[str, Any] | None) -> list[dict[str, str]]:
    headers = (part or {}).get("headers") or {}
    return [{"name": k, "value": v} for k, v in headers.items()]


def _text(body: dict[str, Any] | None) -> str | None:
    if not body:
        return None
    if "json" in body:
        return orjson.dumps(body["json"]).decode()
    text = body.get("text")
    return text if isinstance(text, str) else None


def _content_type(part: dict[str, Any] | None, default: str) -> str:
    headers = {k.lower(): v for k, v in ((part or {}).get("headers") or {}).items()}
    return str(headers.get("content-type", default))


def _request(rec: dict[str, Any]) -> dict[str, Any]:
    query = rec["query"] or ""
    part = rec.get("request")
    out: dict[str, Any] = {
        "method": rec["method"],
        "url": HAR_ORIGIN + rec["path"] + (f"?{query}" if query else ""),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _headers(part),
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(query)],
        "headersSize": -1,
        "bodySize": rec["request_bytes"],
    }
    text = _text((part or {}).get("body"))
    if text is not None:
        out["postData"] = {"mimeType": _content_type(part, "application/json"), "text": text}
    return out


def _response(rec: dict[str, Any]) -> dict[str, Any]:
    part = rec.get("response")
    content: dict[str, Any] = {
        "size": rec["response_bytes"],
        "mimeType": _content_type(part, ""),
    }
    # A stream's bytes were not kept: its assembled output stands in for them.
    text = rec.get("output") if rec["streamed"] else _text((part or {}).get("body"))
    if text:
        content["text"] = text
    return {
        "status": rec["status"] or 0,
        "statusText": "",
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _headers(part),
        "content": content,
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": rec["response_bytes"],
    }


def har_entry(rec: dict[str, Any]) -> dict[str, Any]:
    """One HAR entry; `wait` is the time to first token (or the whole reply when none)."""
    total = max(_ms(rec["duration"]), 0)
    wait = min(_ms(rec["ttft"]), total) if rec["ttft"] is not None else total
    return {
        "startedDateTime": datetime.fromtimestamp(rec["started"], UTC).isoformat(),
        "time": total,
        "request": _request(rec),
        "response": _response(rec),
        "cache": {},
        "timings": {"send": 0, "wait": wait, "receive": round(total - wait, 3)},
        "_tap": {k: v for k, v in rec.items() if k not in _HEAVY},
    }


def har(records: Iterable[dict[str, Any]], version: str) -> dict[str, Any]:
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "ollama-tap", "version": version},
            "entries": [har_entry(r) for r in records],
        }
    }


def write_har(records: Iterable[dict[str, Any]], out: IO[bytes], version: str) -> int:
    """`har(records, version)` written entry by entry as the records are read, so an export
    holds one record at a time (a whole document of a 252 MB database peaked at 538 MiB)."""
    head = orjson.dumps(har((), version))
    opening, closing = head[: -len(b"]}}")], b"]}}"
    out.write(opening)
    n = 0
    for record in records:
        out.write((b",\n" if n else b"\n") + orjson.dumps(har_entry(record)))
        n += 1
    out.write(b"\n" + closing + b"\n")
    return n

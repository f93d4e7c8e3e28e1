"""A record back into wire bytes: status, headers and the timed pieces of its body.

In full mode the recorder keeps the reply body's bytes as relayed, read by read with each
read's offset (ollama_tap/rawreply.py): those are sent back unchanged. A record without them
(larger than --reply-tee-limit, or older) is rebuilt from the final object (or the single
reply) and each output piece's text, kind and offset: native and OpenAI chat streams in
Ollama's own shapes, each line at its recorded offset. What differs from the original wire
then is only what was never stored — a streamed line's `created_at` (put at its offset
before the final one's) and an OpenAI stream's `id` and `created`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any, Final

import orjson

from ollama_tap import ollama
from ollama_tap.ollama.errors import go_json
from ollama_tap.ollama.payloads import native_pieces

_DROPPED: Final = frozenset({"content-length", "transfer-encoding", "content-encoding"})
_STREAM_TYPES: Final = {"ollama": "application/x-ndjson", "openai": "text/event-stream"}


class Unreplayable(Exception):
    """The record cannot be served; the message says why and what would make it servable."""


@dataclass(frozen=True, slots=True)
class Piece:
    at: float
    """Seconds after the request head, as recorded."""
    data: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    streamed: bool
    pieces: list[Piece]


def render(record: dict[str, Any], reads: list[tuple[float, bytes]] | None = None) -> Reply:
    """The reply `record` was, or Unreplayable: its bytes as relayed when the recorder kept
    them (`reads`, Store.reply_reads), else rebuilt from what it keeps of them."""
    rid, endpoint = record["id"], record["endpoint"]
    if record.get("mode") != "full":
        raise Unreplayable(
            f"record {rid} was recorded in {record.get('mode')} mode and keeps no bodies; "
            "record with --record full to replay it"
        )
    headers = {
        k: v for k, v in ((record.get("response") or {}).get("headers") or {}).items()
        if k.lower() not in _DROPPED
    }  # fmt: skip
    status = record["status"] or 502
    if record["streamed"]:
        family = ollama.family_of(endpoint)
        headers.setdefault("Content-Type", _STREAM_TYPES.get(family, "text/event-stream"))
    if reads is not None:
        return Reply(status, headers, bool(record["streamed"]), [Piece(*r) for r in reads])
    body = (record.get("response") or {}).get("body") or {}
    final = body.get("json")
    if body.get("truncated"):
        raise Unreplayable(f"record {rid}'s reply was above the recorder's 1 MiB cap")
    if b'"$omitted":"vector"' in orjson.dumps(final):
        raise Unreplayable(
            f"record {rid} is an embedding whose vectors the recorder keeps only as hashes "
            "(and its reply's bytes were not kept: see `response.raw`)"
        )
    if not record["streamed"]:
        if final is None:
            raise Unreplayable(f"record {rid} has no stored reply (outcome {record['outcome']})")
        at = record["duration"] or 0.0
        data = go_json(_with_context(record, final))
        if record.get("response_bytes") == len(data) + 1:
            data += b"\n"  # json.Encoder's newline (Ollama's /v1 replies), gin's c.JSON has none
        return Reply(status, headers, False, [Piece(at, data)])
    timeline = record.get("timeline") or {"offsets": [], "texts": [], "kinds": [], "bytes": []}
    if timeline["texts"] is None or timeline["text_truncated"]:
        raise Unreplayable(f"record {rid}'s timeline does not keep the whole text")
    if endpoint in ollama.NATIVE_GENERATION:
        return Reply(status, headers, True, _native(record, final, timeline))
    if endpoint == "/v1/chat/completions":
        return Reply(status, headers, True, _openai(record, timeline))
    raise Unreplayable(f"record {rid}: replaying {endpoint} streams is not supported")


Group = tuple[float, list[tuple[str, str]]]


def _groups(timeline: dict[str, Any]) -> list[Group]:
    """Pieces that came on one line (same offset and wire size) together, in order."""
    t = timeline
    rows = zip(t["offsets"], t["bytes"], t["kinds"], t["texts"], strict=True)
    return [
        (at, [(kind, text) for _, _, kind, text in items])
        for (at, _), items in ((k, list(g)) for k, g in groupby(rows, key=lambda r: (r[0], r[1])))
    ]


def _with_context(record: dict[str, Any], final: Any) -> Any:
    """The final object with the `context` the recorder keeps apart, where Ollama puts it."""
    context = record.get("context")
    if context is None or not isinstance(final, dict) or record["endpoint"] != "/api/generate":
        return final
    out: dict[str, Any] = {}
    for key, value in final.items():
        if key == "total_duration":
            out["context"] = context
        out[key] = value
    out.setdefault("context", context)
    return out


def _native(record: dict[str, Any], final: Any, timeline: dict[str, Any]) -> list[Piece]:
    groups = _groups(timeline)
    end = record["duration"] or (groups[-1][0] if groups else 0.0)
    if isinstance(final, dict) and native_pieces(final) and groups:
        end = groups.pop()[0]  # the final object carried output: its line is the last group
    model = final.get("model") if isinstance(final, dict) else record.get("model")
    stamp = final.get("created_at") if isinstance(final, dict) else None
    chat = record["endpoint"] == "/api/chat"
    pieces = [
        Piece(at, go_json(_native_line(chat, model, _shifted(stamp, at - end), items)) + b"\n")
        for at, items in groups
    ]
    if isinstance(final, dict):
        pieces.append(Piece(end, go_json(_with_context(record, final)) + b"\n"))
    elif record.get("error_message") and record["outcome"] == "stream_error":
        pieces.append(Piece(end, go_json({"error": record["error_message"]}) + b"\n"))
    return pieces


def _native_line(chat: bool, model: Any, stamp: str, items: list[tuple[str, str]]) -> Any:
    """One streamed object in Go's field order, as Ollama's GenerateResponse / ChatResponse."""
    content = "".join(t for k, t in items if k == "content")
    thinking = "".join(t for k, t in items if k == "thinking")
    calls = [orjson.loads(t) for k, t in items if k == "tool_call"]
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        return {"model": model, "created_at": stamp, "message": message, "done": False}
    line: dict[str, Any] = {"model": model, "created_at": stamp, "response": content}
    if thinking:
        line["thinking"] = thinking
    line["done"] = False
    if calls:
        line["tool_calls"] = calls
    return line


def _shifted(stamp: Any, seconds: float) -> str:
    """Go's RFC 3339 time `stamp` moved by `seconds` (nanosecond digits, zeros trimmed)."""
    if not isinstance(stamp, str) or "T" not in stamp:
        return ""
    head, _, rest = stamp.partition(".")
    fraction = "".join(c for c in rest if c.isdigit()) if rest else ""
    zone = rest[len(fraction) :] if rest else head[19:]
    try:
        moment = datetime.fromisoformat(head[:19] + (zone if zone != "Z" else "+00:00"))
    except ValueError:
        return stamp
    nanos = int((fraction + "000000000")[:9]) + round(seconds * 1e9)
    moment += timedelta(seconds=nanos // 1_000_000_000)
    digits = f".{nanos % 1_000_000_000:09d}".rstrip("0").rstrip(".")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + digits + zone


def _openai(record: dict[str, Any], timeline: dict[str, Any]) -> list[Piece]:
    request = ((record.get("request") or {}).get("body") or {}).get("json") or {}
    digest = hashlib.sha256(record["id"].encode()).digest()
    offsets = timeline["offsets"]
    frame = {
        "id": f"chatcmpl-{int.from_bytes(digest[:2]) % 999}",
        "object": "chat.completion.chunk",
        # Ollama stamps the stream when its first chunk is made.
        "created": int(record["started"] + (offsets[0] if offsets else 0.0)),
        "model": request.get("model") or record.get("model"),
        "system_fingerprint": "fp_ollama",
    }
    pieces = []
    for n, (at, items) in enumerate(_groups(timeline)):
        delta: dict[str, Any] = {"role": "assistant"} if n == 0 else {}
        delta["content"] = "".join(t for k, t in items if k == "content")
        if thinking := "".join(t for k, t in items if k == "thinking"):
            delta["reasoning"] = thinking
        if calls := [orjson.loads(t) for k, t in items if k == "tool_call"]:
            delta["tool_calls"] = calls
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        pieces.append(Piece(at, _sse({**frame, "choices": [choice]})))
    end = record["duration"] or (pieces[-1].at if pieces else 0.0)
    if record.get("done_reason"):
        choice = {"index": 0, "delta": {}, "finish_reason": record["done_reason"]}
        pieces.append(Piece(end, _sse({**frame, "choices": [choice]})))
        usage = request.get("stream_options") or {}
        if isinstance(usage, dict) and usage.get("include_usage"):
            pieces.append(Piece(end, _sse({**frame, "choices": [], "usage": _usage(record)})))
        pieces.append(Piece(end, b"data: [DONE]\n\n"))
    return pieces


def _usage(record: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = record.get("prompt_tokens") or 0, record.get("eval_tokens") or 0
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if record.get("cached_tokens") is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": record["cached_tokens"]}
    return usage


def _sse(payload: Any) -> bytes:
    return b"data: " + go_json(payload) + b"\n\n"

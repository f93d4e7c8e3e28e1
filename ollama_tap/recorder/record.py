"""One exchange → one row: the columns, the privacy mode applied, heavy parts serialized.

Runs in the writer thread: the hook only hands the finished Exchange over (the relay
no longer touches it after the end hook), so parsing, hashing and JSON encoding of large
bodies never happen on the event loop.

What each mode stores (``Scope.FULL`` exchanges; ``Scope.METADATA`` ones never get bodies,
output, context or a timeline):

- ``full``: every column, allow-listed request and response headers, the request body
  (media as placeholders), the reply or final object (vectors as placeholders, ``context``
  moved out), ``context`` ids, the timeline with its text, numeric options, media hashes,
  and the reply body's bytes as relayed with each read's offset (``reply_raw``, up to
  ``--reply-tee-limit``; the document says when it was larger and none is kept).
- ``metadata``: an allow-list only — no query string and no client address (either
  may identify a person; the bounded client name is kept), no headers, no text of any
  kind, no context ids (their count is the ``context_len`` column), timeline offsets,
  kinds and wire sizes without text, never the reply's bytes.
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ollama_tap import ollama
from ollama_tap.config import RecordMode
from ollama_tap.credentials import redacted_query, redacted_text
from ollama_tap.exchange import Exchange
from ollama_tap.facts import Rewrite, Verdict
from ollama_tap.measures import timings
from ollama_tap.rawreply import summary
from ollama_tap.recorder.redact import BODY_CAP, allowed_headers, capped, scrub
from ollama_tap.recorder.scope import Capture, Scope

COLUMNS: Final = (
    "id", "started", "method", "path", "query", "endpoint", "model", "model_digest",
    "client", "status", "outcome", "streamed", "mode",
    "ttft", "ttfc", "server_ttft", "client_overhead", "load", "queue_wait", "prefill",
    "decode", "total", "duration",
    "prompt_tokens", "cached_tokens", "eval_tokens", "context_len", "done_reason",
    "request_bytes", "response_bytes", "chunks", "error_message", "retried",
    "truncation", "load_event", "client_name", "instance", "upstream", "ollama_version",
    "reload_guard", "box", "route", "nbytes", "doc", "timeline", "reply_raw",
)  # fmt: skip
VALUES: Final = operator.itemgetter(*COLUMNS)
"""A row's values in COLUMNS order: binding them by position spares the driver a dict lookup
per named parameter (36 per row), about 15% of sqlite3's insert CPU."""
ROW_OVERHEAD: Final = 256
"""Rough bytes of a row's scalar columns and index entries, for size-based retention."""


def _context(ex: Exchange) -> list[int] | None:
    if ex.final is None or ex.endpoint not in ollama.NATIVE_GENERATION:
        return None
    context = ex.final.get("context")
    return context if isinstance(context, list) else None


def _json(fact: Verdict | Rewrite | None) -> str | None:
    return None if fact is None else orjson.dumps(fact.as_json()).decode()


def _parsed_request(ex: Exchange) -> Any:
    if ex.request_body is None:
        return None
    try:
        return orjson.loads(ex.request_body)
    except orjson.JSONDecodeError:
        return None


def _request_body(ex: Exchange, scrubbed: Any) -> dict[str, Any] | None:
    body = ex.request_body
    if body is None:
        # Above the tee cap (or not teed): its size is all the proxy knows.
        return (
            {"size": ex.request_bytes, "sha256": None, "truncated": True}
            if ex.request_bytes
            else None
        )
    digest = hashlib.sha256(body).hexdigest() if len(body) == ex.request_bytes else None
    if scrubbed is None:
        stored = {
            # Not JSON: kept as text, with what looks like a credential's value replaced.
            "text": redacted_text(body[:BODY_CAP].decode(errors="replace")),
            "truncated": len(body) > BODY_CAP,
        }
    else:
        stored = capped(orjson.dumps(scrubbed))
    return {"size": ex.request_bytes, "sha256": digest, **stored}


def _reply(ex: Exchange) -> dict[str, Any] | None:
    if ex.final is None:
        return None
    final = ex.final
    if "context" in final:
        final = {k: v for k, v in final.items() if k != "context"}
    return capped(orjson.dumps(scrub(final, [])))


def _doc(ex: Exchange, cap: Capture, full: bool, context: list[int] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if full:
        doc["request"] = {"headers": allowed_headers(ex.request_headers)}
        doc["response"] = {"headers": allowed_headers(ex.response_headers)}
    if cap.scope is not Scope.FULL:
        return doc
    options = ex.request.options or {}
    doc["options"] = {k: v for k, v in options.items() if isinstance(v, int | float)}
    media: list[dict[str, Any]] = []
    scrubbed = scrub(_parsed_request(ex), media)
    doc["media"] = media
    if full:
        doc["request"]["body"] = _request_body(ex, scrubbed)
        doc["response"]["body"] = _reply(ex)
        if cap.raw is not None:
            doc["response"]["raw"] = summary(cap.raw)
        doc["context"] = context
    return doc


def _load_event(ex: Exchange, full: bool) -> str | None:
    """The load event the load tracker put on the exchange; the client address only in
    full mode, as the `client` column."""
    fact = ex.load_event
    return None if fact is None else orjson.dumps(fact.as_json(with_client=full)).decode()


@dataclass(frozen=True, slots=True)
class Origin:
    """Which tap made a record, and where it sent the request: what tells records apart
    when several taps write to one database."""

    instance: str
    """The tap's --instance name."""
    upstream: str
    """The upstream's URL, without user or password (the first box's)."""
    boxes: dict[str, str] = field(default_factory=dict)
    """Each box's URL by name, without user or password: a record names its box's."""


def to_row(ex: Exchange, cap: Capture, mode: RecordMode, origin: Origin) -> dict[str, Any]:
    """The row for one finished exchange, as the privacy mode allows."""
    full = mode is RecordMode.FULL
    u = ex.usage
    context = _context(ex)
    doc = orjson.dumps(_doc(ex, cap, full, context))
    timeline = cap.timeline.pack() if cap.timeline is not None and len(cap.timeline) else None
    raw = cap.raw
    reply_raw = raw.pack(ex.started) if full and raw is not None and not raw.dropped else None
    return {
        "id": ex.id,
        "started": ex.started_wall,
        "method": ex.method,
        "path": ex.path,
        "query": redacted_query(ex.query) if full else None,
        "endpoint": ex.endpoint,
        "model": cap.model,
        "model_digest": cap.digest,
        "client": ex.client if full else None,
        "status": ex.status,
        "outcome": str(ex.outcome),
        "streamed": int(ex.streamed),
        "mode": str(mode),
        **timings(ex),
        "prompt_tokens": u.prompt_eval_count if u else None,
        "cached_tokens": u.prompt_eval_cached_count if u else None,
        "eval_tokens": u.eval_count if u else None,
        "context_len": len(context) if context is not None else None,
        "done_reason": ex.done_reason,
        "request_bytes": ex.request_bytes,
        "response_bytes": ex.response_bytes,
        "chunks": ex.output_events,
        "error_message": ex.error_message,
        "retried": None if ex.retried is None else ex.retried.value,
        "truncation": _json(ex.truncation),
        "load_event": _load_event(ex, full),
        # A bounded label (on the metrics too), unlike the address: kept in every mode.
        "client_name": ex.client_name or None,
        "instance": origin.instance,
        "upstream": origin.boxes.get(ex.box, origin.upstream),
        "ollama_version": cap.version,
        "reload_guard": _json(ex.reload_guard),
        "box": ex.box or None,
        "route": ex.route.reason if ex.route is not None else None,
        "nbytes": ROW_OVERHEAD + len(doc) + len(timeline or b"") + len(reply_raw or b""),
        "doc": doc,
        "timeline": timeline,
        "reply_raw": reply_raw,
    }

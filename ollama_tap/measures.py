"""The README's derived "Measurements" beyond Exchange's and Usage's properties, defined once."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from ollama_tap import ollama
from ollama_tap.exchange import Exchange, Usage
from ollama_tap.ollama.payloads import count_or_none

COLD_START_NS: Final = 1_000_000_000
"""A load_duration above this is a cold start (and /api/ps is read again for num_ctx)."""
CTX_CLASSES: Final = ((4096, "le4k"), (16384, "le16k"), (65536, "le64k"))
"""The context-size classes of the decode rate pair, by upper limit; above the last, gt64k."""
_NS: Final = 1e9


def cold_start(usage: Usage) -> bool:
    """Whether the model was loaded for this reply: its load took more than a second."""
    return usage.load_duration > COLD_START_NS


def ctx_class(context_tokens: int) -> str:
    """The `ctx` label of a context size."""
    for limit, name in CTX_CLASSES:
        if context_tokens <= limit:
            return name
    return "gt64k"


def request_num_ctx(options: dict[str, Any] | None) -> int | None:
    """The request's `options.num_ctx` as Ollama reads it (a float is truncated), or None when
    it sets no count of at least 1: then the runtime num_ctx is the loaded model's."""
    return count_or_none((options or {}).get("num_ctx")) or None


def _wall(created_at: str | None) -> float | None:
    if not created_at:
        return None
    try:
        return datetime.fromisoformat(created_at).timestamp()
    except ValueError:
        return None


def timings(ex: Exchange) -> dict[str, float | None]:
    """Client-side times and Ollama's phases in seconds, with server TTFT and client overhead;
    None for what the exchange cannot tell."""
    out: dict[str, float | None] = {
        "ttft": ex.ttft, "ttfc": ex.ttfc, "duration": ex.duration,
        "server_ttft": None, "client_overhead": None, "load": None, "queue_wait": None,
        "prefill": None, "decode": None, "total": None,
    }  # fmt: skip
    u = ex.usage
    if u is None or not u.has_timings:
        return out
    total = u.total_duration / _NS
    out.update(load=u.load_duration / _NS, total=total)
    if ex.endpoint in ollama.NATIVE_GENERATION:
        # Only generate/chat replies have phases (as in the metrics): an embedding reply
        # reports no prefill or decode, so its compute would all show as "queue wait".
        out.update(prefill=u.prompt_eval_duration / _NS, decode=u.eval_duration / _NS)
        out["queue_wait"] = u.queue_wait_ns / _NS
    first, final = _wall(ex.first_created_at), _wall(ex.final_created_at)
    if first is not None and final is not None:
        # On Ollama's clock: the first chunk's created_at less the reply's start, which is
        # the final created_at less total_duration.
        server_ttft = first - (final - total)
        out["server_ttft"] = server_ttft
        if ex.ttft is not None:
            out["client_overhead"] = ex.ttft - server_ttft
    return out

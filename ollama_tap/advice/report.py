"""The advice of one model and client: a window's tally, the context that would have held its
prompts, and that context's memory where /api/show and /api/ps allow an estimate.

The same document serves `ollama-tap context --json`, `GET /_tap/api/context` and the
inspector's Loads view; docs/diagnoses.md ("Advice") describes each field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ollama_tap.advice.sizing import KvShape, Loaded, padded
from ollama_tap.advice.window import Tally
from ollama_tap.ollama.names import canonical_model

CACHE_TYPE: Final = "f16"
"""The KV cache type the estimates assume: Ollama's default (`OLLAMA_KV_CACHE_TYPE`)."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """What Ollama said of the models, by the name the records use; empty when unread."""

    shapes: Mapping[str, KvShape | None]
    loaded: Mapping[str, Loaded]
    problem: str | None = None
    """Why nothing could be read (Ollama down, a bad --url), for the caller to show."""


def advise(tallies: Sequence[Tally], upstream: Upstream) -> list[dict[str, Any]]:
    """One advice document per tally, in the tallies' order."""
    return [_one(t, upstream) for t in tallies]


def _one(t: Tally, upstream: Upstream) -> dict[str, Any]:
    name = canonical_model(t.model) or t.model
    shape = upstream.shapes.get(name)
    row = upstream.loaded.get(name)
    context = row.context if row is not None and row.context else t.context
    needed = t.need.tokens if t.need is not None else None
    num_ctx = padded(needed) if needed else None
    train = shape.train if shape is not None else None
    doc: dict[str, Any] = {
        "model": t.model,
        "client": t.client,
        "requests": t.requests,
        "cut": t.cut,
        "cut_share": t.cut / t.requests if t.requests else 0.0,
        "overflowed": t.overflowed,
        "context": context,
        "needed": needed,
        "needed_exact": t.need.exact if t.need is not None else None,
        "num_ctx": num_ctx,
        "over_training": bool(num_ctx and train and num_ctx > train),
        "training_context": train,
        "cache_type": CACHE_TYPE,
        "kv_bytes": None,
        "kv_bytes_now": None,
        "kv_upper_bound": bool(shape and shape.sliding_window),
        "loaded_size": row.size if row is not None else None,
        "estimated_size": None,
    }
    if shape is not None and num_ctx:
        doc["kv_bytes"] = shape.bytes_at(min(num_ctx, train or num_ctx))
        if context:  # what the runner has now: its slot, padded as well
            doc["kv_bytes_now"] = shape.bytes_at(padded(context))
        if row is not None and row.context:
            doc["estimated_size"] = row.size + doc["kv_bytes"] - shape.bytes_at(padded(row.context))
    doc["advice"] = sentence(doc)
    return doc


def human_bytes(size: int) -> str:
    """Decimal units, as `ollama list` shows sizes: `512 B`, `75.5 MB`, `1.2 GB`."""
    value = float(abs(size))
    sign = "-" if size < 0 else ""
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1000
    return f"{sign}{value:.1f} TB"


def sentence(doc: Mapping[str, Any]) -> str:
    """What to do, in one line: nothing, or the num_ctx to set and what it costs."""
    num_ctx, context = doc["num_ctx"], doc["context"]
    if not doc["cut"] and not doc["overflowed"]:
        if num_ctx and context and num_ctx < context:
            return f"every prompt fit; the largest needed {doc['needed']:,} tokens"
        return "every prompt fit"
    if num_ctx is None:
        return "prompts did not fit, by an unknown amount; raise num_ctx"
    if doc["over_training"]:
        return (
            f"needs {'at least ' if not doc['needed_exact'] else ''}{doc['needed']:,} tokens, "
            f"over the model's training context {doc['training_context']:,}: shorten the "
            "prompts or use a model with a longer context"
        )
    at_least = "" if doc["needed_exact"] else "at least "
    cost = ""
    if doc["kv_bytes"] is not None:
        more = doc["kv_bytes"] - (doc["kv_bytes_now"] or 0)
        bound = "up to " if doc["kv_upper_bound"] else ""
        cost = f" ({bound}{human_bytes(doc['kv_bytes'])} of {CACHE_TYPE} KV cache"
        cost += f", {human_bytes(more)} more)" if doc["kv_bytes_now"] is not None else ")"
    return f"set num_ctx to {at_least}{num_ctx:,}{cost}"

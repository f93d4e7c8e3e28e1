"""What a payload means: typed reads of untrusted JSON, output pieces, usage and done_reason."""

from __future__ import annotations

from typing import Any, Final

import orjson
from orjson import JSONDecodeError
from orjson import loads as _loads

from ollama_tap.exchange import Exchange, OutputChunk, OutputKind, Usage

# --- Guards: every payload field is untrusted, so each read checks its type.


def json_object(data: bytes | bytearray) -> dict[str, Any] | None:
    """`data` parsed, if it is one JSON object; None for anything else, empty data too."""
    try:
        obj = _loads(data)
    except JSONDecodeError:
        return None
    return obj if type(obj) is dict else None  # orjson makes no dict subclasses


def nonempty_str(value: Any) -> str | None:
    """`value` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def str_or_empty(value: Any) -> str:
    """`value` if it is a string (empty or not), else ""."""
    return value if isinstance(value, str) else ""


def bool_or_none(value: Any) -> bool | None:
    """`value` if it is a JSON boolean, else None."""
    return value if isinstance(value, bool) else None


def dict_or_none(value: Any) -> dict[str, Any] | None:
    """`value` if it is a JSON object, else None."""
    return value if isinstance(value, dict) else None


COUNT_MAX: Final = 2**63 - 1
"""Ollama's counts and durations are 64-bit; a larger number is no count (and no SQLite
integer, nor any Prometheus value worth keeping)."""


def count_or_none(value: Any) -> int | None:
    """`value` as an int if it is a number from 0 to COUNT_MAX (a float is truncated), else
    None: booleans, negatives, larger numbers and NaN are no counts."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value <= COUNT_MAX:
        return None  # NaN compares false too
    return int(value)


def count_or_zero(value: Any) -> int:
    """`count_or_none(value)`, with 0 for no count (Ollama omits zero fields)."""
    return count_or_none(value) or 0


def compact_json(value: Any) -> str:
    """`value` as compact JSON text."""
    return orjson.dumps(value).decode()


def error_text(obj: dict[str, Any]) -> str | None:
    """The error message of `{"error": "..."}` (native) or `{"error": {"message": ...}}`
    (OpenAI, Anthropic), or None when `obj` is not an error."""
    error = obj.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) else compact_json(error)
    return error if isinstance(error, str) else None


# --- Output pieces.

Pieces = list[tuple[OutputKind, str]]


def output_pieces(thinking: Any, content: Any, tool_calls: Any) -> Pieces:
    """Output pieces in reading order (thinking, content, then one per tool call)."""
    pieces: Pieces = []
    if text := nonempty_str(thinking):
        pieces.append((OutputKind.THINKING, text))
    if text := nonempty_str(content):
        pieces.append((OutputKind.CONTENT, text))
    if isinstance(tool_calls, list):
        pieces.extend((OutputKind.TOOL_CALL, compact_json(call)) for call in tool_calls)
    return pieces


def chunks_of(pieces: Pieces, at: float, nbytes: int) -> list[OutputChunk]:
    """`pieces` as output chunks, each stamped with `at` and `nbytes`."""
    return [OutputChunk(at, kind, text, nbytes) for kind, text in pieces]


def native_pieces(obj: dict[str, Any]) -> Pieces:
    """The output of a native /api/chat (`message`) or /api/generate object."""
    message = obj.get("message")
    if isinstance(message, dict):
        return output_pieces(
            message.get("thinking"), message.get("content"), message.get("tool_calls")
        )
    return output_pieces(obj.get("thinking"), obj.get("response"), obj.get("tool_calls"))


def reply_pieces(obj: dict[str, Any]) -> Pieces:
    """The output of a whole, non-streamed reply — the single-reply counterpart of what
    the stream readers find in deltas — in any family's shape: native generate/chat,
    OpenAI chat or text completion, OpenAI Responses, Anthropic message."""
    choices = obj.get("choices")
    if isinstance(choices, list):
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if isinstance(message, dict):
            return output_pieces(
                message.get("reasoning"), message.get("content"), message.get("tool_calls")
            )
        return output_pieces(None, choice.get("text"), None)
    if isinstance(content := obj.get("content"), list):
        return [piece for block in content for piece in _block_pieces(block)]
    if isinstance(output := obj.get("output"), list):
        return [piece for item in output for piece in _item_pieces(item)]
    return native_pieces(obj)


def _block_pieces(block: Any) -> Pieces:
    """An Anthropic content block."""
    if not isinstance(block, dict):
        return []
    kind = block.get("type")
    if kind == "tool_use":
        return [(OutputKind.TOOL_CALL, compact_json(block))]
    return output_pieces(block.get("thinking"), block.get("text") if kind == "text" else None, None)


def _item_pieces(item: Any) -> Pieces:
    """An OpenAI Responses output item."""
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    if kind == "function_call":
        return [(OutputKind.TOOL_CALL, compact_json(item))]
    parts = item.get("summary") if kind == "reasoning" else item.get("content")
    texts = "".join(nonempty_str(p.get("text")) or "" for p in parts or [] if isinstance(p, dict))
    return (
        output_pieces(texts, None, None)
        if kind == "reasoning"
        else output_pieces(None, texts, None)
    )


def responses_delta_pieces(name: str, delta: Any) -> Pieces:
    """The output of an OpenAI Responses `response.*.delta` event named `name`."""
    text = nonempty_str(delta)
    if text is None:
        return []
    if "reasoning" in name:
        return [(OutputKind.THINKING, text)]
    return [(OutputKind.TOOL_CALL if "_call" in name else OutputKind.CONTENT, text)]


_ANTHROPIC_DELTAS: Final = {
    "text_delta": ("text", OutputKind.CONTENT),
    "thinking_delta": ("thinking", OutputKind.THINKING),
    "input_json_delta": ("partial_json", OutputKind.TOOL_CALL),
}
"""Delta types that are output; signature and citation deltas carry no visible text."""


def anthropic_delta_pieces(delta: Any) -> Pieces:
    """The output of an Anthropic `content_block_delta` event's `delta`."""
    if not isinstance(delta, dict) or delta.get("type") not in _ANTHROPIC_DELTAS:
        return []
    field, kind = _ANTHROPIC_DELTAS[delta["type"]]
    text = nonempty_str(delta.get(field))
    return [(kind, text)] if text else []


# --- Usage and done_reason.

_NATIVE_DURATIONS: Final = (
    "total_duration",
    "load_duration",
    "prompt_eval_duration",
    "eval_duration",
)
_NATIVE_STATS: Final = ("prompt_eval_count", "eval_count", *_NATIVE_DURATIONS)


def _native_usage(obj: dict[str, Any]) -> Usage:
    """Stats of a native final object; Ollama omits zero fields, so a missing one is 0.

    `has_timings` is True when at least one duration field is present, which excludes
    load/unload replies and `/api/embeddings` (they carry none).
    """
    return Usage(
        total_duration=count_or_zero(obj.get("total_duration")),
        load_duration=count_or_zero(obj.get("load_duration")),
        prompt_eval_count=count_or_zero(obj.get("prompt_eval_count")),
        prompt_eval_duration=count_or_zero(obj.get("prompt_eval_duration")),
        eval_count=count_or_zero(obj.get("eval_count")),
        eval_duration=count_or_zero(obj.get("eval_duration")),
        prompt_eval_cached_count=count_or_none(obj.get("prompt_eval_cached_count")),
        has_timings=any(key in obj for key in _NATIVE_DURATIONS),
    )


def native_stats(ex: Exchange, obj: dict[str, Any]) -> None:
    """Fills `ex` from a native final object: done_reason, usage, final created_at.

    A reply that reports no stats at all (the legacy /api/embeddings vector) has no usage:
    its counts are unknown, not 0. A final object without them (load, unload) counts 0.
    """
    ex.done_reason = nonempty_str(obj.get("done_reason"))
    reports = obj.get("done") is True or any(key in obj for key in _NATIVE_STATS)
    ex.usage = _native_usage(obj) if reports else None
    ex.final_created_at = nonempty_str(obj.get("created_at"))


def compat_usage(usage: Any) -> Usage | None:
    """Token counts from an OpenAI, Responses or Anthropic `usage` object (no timings).

    The cached count is `prompt_tokens_details.cached_tokens` (OpenAI) or
    `input_tokens_details.cached_tokens` (Responses), both part of the prompt count. Anthropic
    counts cache reads and writes apart from `input_tokens` (a disjoint partition), so they
    are added to the prompt count. A usage without a prompt count (llama-server's Anthropic
    `message_delta` counts the output only) leaves it unknown.
    """
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    cached = count_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None
    prompt = count_or_none(usage.get("prompt_tokens", usage.get("input_tokens")))
    if "cache_read_input_tokens" in usage:
        cached = count_or_zero(usage["cache_read_input_tokens"])
        prompt = (prompt or 0) + cached + count_or_zero(usage.get("cache_creation_input_tokens"))
    return Usage(
        prompt_eval_count=prompt,
        eval_count=count_or_zero(usage.get("completion_tokens", usage.get("output_tokens"))),
        prompt_eval_cached_count=cached,
    )


def has_counts(usage: Usage | None) -> bool:
    """Whether `usage` counts any token (prompt, output or cached)."""
    return usage is not None and bool(
        usage.prompt_eval_count or usage.eval_count or usage.prompt_eval_cached_count
    )


def _compat_done_reason(obj: dict[str, Any]) -> str | None:
    """finish_reason (OpenAI), stop_reason (Anthropic), or the Responses status/reason."""
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return nonempty_str(choices[0].get("finish_reason"))
    details = obj.get("incomplete_details")
    if isinstance(details, dict):
        return nonempty_str(details.get("reason"))
    return nonempty_str(obj.get("stop_reason")) or nonempty_str(obj.get("status"))


def compat_stats(ex: Exchange, obj: dict[str, Any]) -> None:
    """Fills `ex` from a whole OpenAI, Responses or Anthropic reply: usage, done_reason."""
    ex.usage = compat_usage(obj.get("usage")) or ex.usage
    ex.done_reason = _compat_done_reason(obj) or ex.done_reason

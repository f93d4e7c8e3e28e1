"""The assembled output of a record: from its timeline's text, else from the stored reply."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ollama_tap.ollama.payloads import reply_pieces


def _tool(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _assemble(pieces: Iterable[tuple[str, str]]) -> dict[str, Any]:
    parts: dict[str, list[str]] = {"content": [], "thinking": [], "tool_call": []}
    for kind, text in pieces:
        parts[kind].append(text)
    return {
        "output": "".join(parts["content"]),
        "thinking": "".join(parts["thinking"]),
        "tool_calls": [_tool(t) for t in parts["tool_call"] if t],
    }


def from_timeline(timeline: dict[str, Any]) -> dict[str, Any]:
    return _assemble(zip(timeline["kinds"], timeline["texts"], strict=True))


def from_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """A single stored reply, read by the same rules as every other reply (ollama_tap.ollama)."""
    return _assemble(reply_pieces(reply))

"""The assembled output of a record: from its timeline's text, else from the stored reply."""

from __future__ import annotations

from typing import Any

import orjson


def _tool(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def from_timeline(timeline: dict[str, Any]) -> dict[str, Any]:
    parts: dict[str, list[str]] = {"content": [], "thinking": [], "tool_call": []}
    for kind, text in zip(timeline["kinds"], timeline["texts"], strict=True):
        parts[kind].append(text)
    return {
        "output": "".join(parts["content"]),
        "thinking": "".join(parts["thinking"]),
        "tool_calls": [_tool(t) for t in parts["tool_call"] if t],
    }


def from_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Native generate/chat, OpenAI chat/completions and Anthropic message shapes."""
    message = reply.get("message")
    if isinstance(message, dict):  # native chat
        reply = message
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        reply = choice.get("message") or {"content": choice.get("text")}
    content = reply.get("response", reply.get("content"))
    if isinstance(content, list):  # Anthropic content blocks
        return {
            "output": "".join(b.get("text", "") for b in content if b.get("type") == "text"),
            "thinking": "".join(
                b.get("thinking", "") for b in content if b.get("type") == "thinking"
            ),
            "tool_calls": [b for b in content if b.get("type") == "tool_use"],
        }
    return {
        "output": content if isinstance(content, str) else "",
        "thinking": reply.get("thinking") or reply.get("reasoning") or "",
        "tool_calls": reply.get("tool_calls") or [],
    }

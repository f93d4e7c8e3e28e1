"""Prompts and outputs as the GenAI conventions shape them, for the `full` privacy mode only.

`gen_ai.input.messages`, `gen_ai.system_instructions` and `gen_ai.output.messages` are JSON
strings of role and parts. Only roles and text (and tool-call arguments) are taken: no
header, query or other body key reaches a span, so no credential can
(ollama_tap/credentials.py is about exactly those), and no image or blob either.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from ollama_tap.exchange import Exchange, OutputKind
from ollama_tap.ollama.payloads import reply_pieces
from ollama_tap.otel import semconv as sc
from ollama_tap.otel.spans import Attributes

OUTPUT_CAP: Final = 256 * 1024
"""Characters of output text a span carries per part; past it the text is cut (`…` marks it)."""

_PART_TYPES: Final = {
    OutputKind.CONTENT: "text",
    OutputKind.THINKING: "reasoning",
    OutputKind.TOOL_CALL: "tool_call",
}


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    if not isinstance(content, list):
        return []
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "content": item})
        elif isinstance(item, dict):
            text = item.get("text")
            if isinstance(text, str):
                parts.append({"type": "text", "content": text})
            else:
                parts.append({"type": str(item.get("type", "unknown"))})
    return parts


def _messages(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "parts": _parts(items)}]
    if not isinstance(items, list):
        return []
    out = []
    for message in items:
        if isinstance(message, dict):
            role = message.get("role")
            out.append(
                {
                    "role": role if isinstance(role, str) else "user",
                    "parts": _parts(message.get("content")),
                }
            )
        elif isinstance(message, str):
            out.append({"role": "user", "parts": _parts(message)})
    return out


def input_attributes(body: dict[str, Any]) -> Attributes:
    """The prompt of a request body of any family: `messages` (chat), `prompt` (generate,
    completions), `input` (responses); `system` / `instructions` as system instructions."""
    messages: list[dict[str, Any]] = []
    for key in ("messages", "prompt", "input"):
        if key in body:
            messages = _messages(body[key])
            break
    attrs: Attributes = {}
    if messages:
        attrs[sc.INPUT_MESSAGES] = orjson.dumps(messages).decode()
    for key in ("system", "instructions"):
        if parts := _parts(body.get(key)):
            attrs[sc.SYSTEM_INSTRUCTIONS] = orjson.dumps(parts).decode()
            break
    return attrs


def _joined(runs: list[tuple[OutputKind, str]]) -> list[dict[str, Any]]:
    """Runs as parts (a stream's tokens make one text part), each cut at OUTPUT_CAP."""
    parts: list[dict[str, Any]] = []
    for kind, text in runs:
        if len(text) > OUTPUT_CAP:
            text = text[:OUTPUT_CAP] + "…"
        key = "arguments" if kind is OutputKind.TOOL_CALL else "content"
        parts.append({"type": _PART_TYPES[kind], key: text})
    return parts


def output_attributes(ex: Exchange) -> Attributes:
    """The reply's output: the text kept of its pieces (`Exchange.output_text`: the recorder
    keeps it for every inference exchange in `full` mode), else a single reply's final
    object."""
    kept = ex.output_text
    runs = kept.runs() if kept is not None else None
    if not runs and ex.final is not None and not ex.streamed:
        runs = []
        for kind, text in reply_pieces(ex.final):
            if kind is not OutputKind.TOOL_CALL and runs and runs[-1][0] is kind:
                runs[-1] = (kind, runs[-1][1] + text)
            else:
                runs.append((kind, text))
    if not runs:
        return {}
    message: dict[str, Any] = {"role": "assistant", "parts": _joined(runs)}
    if ex.done_reason is not None:
        message["finish_reason"] = ex.done_reason
    return {sc.OUTPUT_MESSAGES: orjson.dumps([message]).decode()}

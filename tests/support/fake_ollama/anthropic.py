"""The Anthropic Messages compatibility layer under /v1/messages."""

from __future__ import annotations

import secrets
import time
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.engine import Engine, Route
from tests.support.fake_ollama.gojson import go_json
from tests.support.fake_ollama.incoming import json_body
from tests.support.fake_ollama.replies import Refused, fold_or_refuse, gin_json, write_events
from tests.support.fake_ollama.script import Chunk

_ANTHROPIC_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
}


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


async def anthropic_error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    body = {
        "type": "error",
        "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": "req_" + secrets.token_hex(12),
    }
    return await gin_json(request, body, status)


def _anthropic_stop_reason(chunk: Chunk, tool_calls_seen: bool) -> str:
    if tool_calls_seen:
        return "tool_use"
    return {"stop": "end_turn", "length": "max_tokens"}.get(chunk.done_reason, "stop_sequence")


def _anthropic_input_estimate(body: dict[str, Any]) -> int:
    """message_start's input_tokens: characters / 4, the real count being unknown yet."""
    chars = len(body["system"]) if isinstance(body.get("system"), str) else 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(b.get("text", "")) for b in content if isinstance(b, dict))
    return chars // 4


class _AnthropicConverter:
    """Native chat chunks to Anthropic Messages events."""

    def __init__(self, model: str, body: dict[str, Any]) -> None:
        self.model = model
        self.message_id = "msg_" + secrets.token_hex(12)
        self.input_estimate = _anthropic_input_estimate(body)
        self.started = False
        self.block_index = -1
        self.block_type = ""
        self.tool_calls_seen = False

    def _open(self, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = self._close()
        self.block_index += 1
        self.block_type = block["type"]
        start = {"type": "content_block_start", "index": self.block_index, "content_block": block}
        return [*events, ("content_block_start", start)]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.block_type:
            return []
        self.block_type = ""
        return [("content_block_stop", {"type": "content_block_stop", "index": self.block_index})]

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {
            "type": "content_block_delta",
            "index": self.block_index,
            "delta": delta,
        }

    def process(self, chunk: Chunk) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if not self.started:
            self.started = True
            message: dict[str, Any] = {
                "id": self.message_id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": self.input_estimate, "output_tokens": 0},
            }
            events.append(("message_start", {"type": "message_start", "message": message}))
        if chunk.thinking:
            if self.block_type != "thinking":
                events += self._open({"type": "thinking", "thinking": ""})
            events.append(self._delta({"type": "thinking_delta", "thinking": chunk.thinking}))
        if chunk.content:
            if self.block_type != "text":
                events += self._open({"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": chunk.content}))
        for call in chunk.tool_calls or []:
            self.tool_calls_seen = True
            function = call["function"]
            events += self._open(
                {"type": "tool_use", "id": call["id"], "name": function["name"], "input": {}}
            )
            arguments = go_json(function["arguments"]).decode()
            events.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        if chunk.done:
            events += self._close()
            delta = {
                "type": "message_delta",
                "delta": {
                    "stop_reason": _anthropic_stop_reason(chunk, self.tool_calls_seen),
                    "stop_sequence": None,
                },
                "usage": {
                    "input_tokens": chunk.metrics.get("prompt_eval_count", 0),
                    "output_tokens": chunk.metrics.get("eval_count", 0),
                },
            }
            events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
        return events

    def message(self, chunk: Chunk) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if chunk.thinking:
            content.append({"type": "thinking", "thinking": chunk.thinking})
        if chunk.content:
            content.append({"type": "text", "text": chunk.content})
        for call in chunk.tool_calls or []:
            function = call["function"]
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": function["name"],
                    "input": function["arguments"],
                }
            )
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": _anthropic_stop_reason(chunk, bool(chunk.tool_calls)),
            "stop_sequence": None,
            "usage": {
                "input_tokens": chunk.metrics.get("prompt_eval_count", 0),
                "output_tokens": chunk.metrics.get("eval_count", 0),
            },
        }


async def messages(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        raise Refused(400, "max_tokens is required and must be greater than 0")
    if not body.get("messages"):
        raise Refused(400, "messages is required")
    name, run = fake.compat_run(body, start_ns, think=True, chat=True)
    converter = _AnthropicConverter(name, body)
    events = fake.produce(run, context=False)
    if body.get("stream") is True:
        return await write_events(
            request, events, converter.process, _ANTHROPIC_SSE_HEADERS, anthropic_error
        )
    result = await fold_or_refuse(request, events)
    if isinstance(result, web.StreamResponse):
        return result
    return await gin_json(request, converter.message(result))


ROUTES: list[Route] = [("POST", "/v1/messages", messages)]

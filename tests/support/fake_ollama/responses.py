"""The OpenAI Responses API under /v1/responses, after Ollama's ResponsesStreamConverter."""

from __future__ import annotations

import random
import time
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.engine import Engine, Route
from tests.support.fake_ollama.gojson import sorted_map
from tests.support.fake_ollama.incoming import json_body
from tests.support.fake_ollama.openai import openai_error, openai_tool_calls
from tests.support.fake_ollama.replies import encoder_json, fold_or_refuse, write_events
from tests.support.fake_ollama.script import Chunk

_SSE_HEADERS = {"Content-Type": "text/event-stream"}


class _ResponsesConverter:
    """Native chat chunks to Responses API events, after Ollama's ResponsesStreamConverter."""

    def __init__(self, model: str, request: dict[str, Any]) -> None:
        self.model = model
        self.request = request
        self.response_id = f"resp_{random.randrange(999999)}"
        self.item_id = f"msg_{random.randrange(999999)}"
        self.sequence = 0
        self.output_index = 0
        self.started = False
        self.text = ""
        self.content_started = False
        self.tool_calls_sent = False
        self.thinking = ""
        self.reasoning_id = ""
        self.reasoning_done = False
        self.tool_items: list[dict[str, Any]] = []

    def _event(self, kind: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        payload = sorted_map({**data, "type": kind, "sequence_number": self.sequence})
        self.sequence += 1
        return kind, payload

    def response_object(self, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        request = self.request
        reasoning = request.get("reasoning") or {}
        text_format = (request.get("text") or {}).get("format") or {"type": "text"}
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "incomplete_details": None,
            "model": self.model,
            "previous_response_id": None,
            "instructions": request.get("instructions") or None,
            "output": output,
            "error": None,
            "tools": request.get("tools") or [],
            "tool_choice": "auto",
            "truncation": request.get("truncation") or "disabled",
            "parallel_tool_calls": True,
            "text": {"format": text_format},
            "top_p": request.get("top_p", 1.0),
            "presence_penalty": 0,
            "frequency_penalty": 0,
            "top_logprobs": 0,
            "temperature": request.get("temperature", 1.0),
            "reasoning": (
                {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
                if reasoning
                else None
            ),
            "usage": usage,
            "max_output_tokens": request.get("max_output_tokens"),
            "max_tool_calls": None,
            "store": False,
            "background": bool(request.get("background")),
            "service_tier": "default",
            "metadata": {},
            "safety_identifier": None,
            "prompt_cache_key": None,
        }

    def process(self, chunk: Chunk) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if not self.started:
            self.started = True
            for kind in ("response.created", "response.in_progress"):
                events.append(
                    self._event(kind, {"response": self.response_object("in_progress", [], None)})
                )
        if chunk.thinking:
            events += self._thinking(chunk.thinking)
        if chunk.tool_calls:
            events += self._tool_calls(chunk.tool_calls)
            self.tool_calls_sent = True
        elif not self.tool_calls_sent and chunk.content:
            events += self._text(chunk.content)
        if chunk.done:
            events += self._completion(chunk)
        return events

    def _thinking(self, thinking: str) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if not self.reasoning_id:
            self.reasoning_id = f"rs_{random.randrange(999999)}"
            item = {"id": self.reasoning_id, "type": "reasoning", "summary": []}
            events.append(
                self._event(
                    "response.output_item.added", {"output_index": self.output_index, "item": item}
                )
            )
        self.thinking += thinking
        where = {
            "item_id": self.reasoning_id,
            "output_index": self.output_index,
            "summary_index": 0,
        }
        events.append(
            self._event("response.reasoning_summary_text.delta", {**where, "delta": thinking})
        )
        return events

    def _reasoning_item(self) -> dict[str, Any]:
        return {
            "id": self.reasoning_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": self.thinking}],
            "encrypted_content": self.thinking,
        }

    def _finish_reasoning(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.reasoning_id or self.reasoning_done:
            return []
        self.reasoning_done = True
        where = {
            "item_id": self.reasoning_id,
            "output_index": self.output_index,
            "summary_index": 0,
        }
        events = [
            self._event("response.reasoning_summary_text.done", {**where, "text": self.thinking}),
            self._event(
                "response.output_item.done",
                {"output_index": self.output_index, "item": self._reasoning_item()},
            ),
        ]
        self.output_index += 1
        return events

    def _tool_calls(self, calls: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        events = self._finish_reasoning()
        for i, call in enumerate(openai_tool_calls(calls)):
            item_id = f"fc_{random.randrange(999999)}_{i}"
            arguments = call["function"]["arguments"]
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": arguments,
            }
            self.tool_items.append(item)
            index = self.output_index + i
            added = {**item, "status": "in_progress", "arguments": ""}
            events.append(
                self._event("response.output_item.added", {"output_index": index, "item": added})
            )
            where = {"item_id": item_id, "output_index": index}
            if arguments:
                events.append(
                    self._event(
                        "response.function_call_arguments.delta", {**where, "delta": arguments}
                    )
                )
            events.append(
                self._event(
                    "response.function_call_arguments.done", {**where, "arguments": arguments}
                )
            )
            events.append(
                self._event("response.output_item.done", {"output_index": index, "item": item})
            )
        return events

    def _text_part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}

    def _message_item(self, status: str) -> dict[str, Any]:
        content = [self._text_part()] if status == "completed" else []
        return {
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _text(self, content: str) -> list[tuple[str, dict[str, Any]]]:
        events = self._finish_reasoning()
        where = {"item_id": self.item_id, "output_index": self.output_index, "content_index": 0}
        if not self.content_started:
            self.content_started = True
            item = self._message_item("in_progress")
            events.append(
                self._event(
                    "response.output_item.added", {"output_index": self.output_index, "item": item}
                )
            )
            events.append(
                self._event("response.content_part.added", {**where, "part": self._text_part()})
            )
        self.text += content
        delta = {**where, "delta": content, "logprobs": []}
        events.append(self._event("response.output_text.delta", delta))
        return events

    def final_output(self) -> list[Any]:
        output: list[Any] = [self._reasoning_item()] if self.reasoning_id else []
        if self.tool_items:
            output += self.tool_items
        elif self.content_started:
            output.append(self._message_item("completed"))
        return output

    def _completion(self, chunk: Chunk) -> list[tuple[str, dict[str, Any]]]:
        events = self._finish_reasoning()
        if not self.tool_calls_sent and self.content_started:
            where = {"item_id": self.item_id, "output_index": self.output_index, "content_index": 0}
            events += [
                self._event(
                    "response.output_text.done", {**where, "text": self.text, "logprobs": []}
                ),
                self._event("response.content_part.done", {**where, "part": self._text_part()}),
                self._event(
                    "response.output_item.done",
                    {"output_index": self.output_index, "item": self._message_item("completed")},
                ),
            ]
        response = self.response_object("completed", self.final_output(), self.usage(chunk))
        events.append(self._event("response.completed", {"response": response}))
        return events

    @staticmethod
    def usage(chunk: Chunk) -> dict[str, Any]:
        prompt = chunk.metrics.get("prompt_eval_count", 0)
        output = chunk.metrics.get("eval_count", 0)
        return {
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": prompt + output,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }


async def create_response(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    effort = (body.get("reasoning") or {}).get("effort")
    name, run = fake.compat_run(body, start_ns, think=effort != "none", chat=True)
    converter = _ResponsesConverter(name, body)
    events = fake.produce(run, context=False)
    if body.get("stream") is True:
        return await write_events(request, events, converter.process, _SSE_HEADERS, openai_error)
    result = await fold_or_refuse(request, events)
    if isinstance(result, web.StreamResponse):
        return result
    converter.process(result)
    reply = converter.response_object(
        "completed", converter.final_output(), converter.usage(result)
    )
    return await encoder_json(request, sorted_map(reply))


ROUTES: list[Route] = [("POST", "/v1/responses", create_response)]

"""The OpenAI compatibility layer under /v1: chat and text completions, embeddings, models."""

from __future__ import annotations

import base64
import random
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.context import embed_counts
from tests.support.fake_ollama.engine import Engine, Route, compat_body
from tests.support.fake_ollama.gojson import go_json
from tests.support.fake_ollama.incoming import json_body
from tests.support.fake_ollama.models import FakeModel, embedding, token_estimate
from tests.support.fake_ollama.replies import (
    LazyStream,
    Refused,
    encoder_json,
    fold_or_refuse,
    sse_data,
)
from tests.support.fake_ollama.script import Chunk, Die, Error, Event


def _openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def openai_error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    return await encoder_json(request, _openai_error_body(status, message), status)


def _finish_reason(chunk: Chunk, tool_calls_seen: bool) -> str:
    if tool_calls_seen and chunk.done_reason == "stop":
        return "tool_calls"
    return chunk.done_reason


def openai_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": call["id"],
            "index": call["function"]["index"],
            "type": "function",
            "function": {
                "name": call["function"]["name"],
                "arguments": go_json(call["function"]["arguments"]).decode(),
            },
        }
        for call in calls
    ]


def _openai_usage(chunk: Chunk) -> dict[str, Any]:
    prompt = chunk.metrics.get("prompt_eval_count", 0)
    completion = chunk.metrics.get("eval_count", 0)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "prompt_eval_cached_count" in chunk.metrics:
        usage["prompt_tokens_details"] = {
            "cached_tokens": chunk.metrics["prompt_eval_cached_count"]
        }
    return usage


def _openai_delta(chunk: Chunk, first: bool) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    delta["content"] = chunk.content
    if chunk.thinking:
        delta["reasoning"] = chunk.thinking
    if chunk.tool_calls:
        delta["tool_calls"] = openai_tool_calls(chunk.tool_calls)
    return delta


async def _openai_chat_stream(
    request: web.Request, events: AsyncIterator[Event], model: str, include_usage: bool
) -> web.StreamResponse:
    """/v1/chat/completions SSE: deltas, a finish chunk, optional usage, [DONE]."""
    out = LazyStream(request, {"Content-Type": "text/event-stream"})
    chunk_id = f"chatcmpl-{random.randrange(999)}"
    created = 0
    tool_calls_seen = False

    def frame(choices: list[dict[str, Any]], name: str = model) -> dict[str, Any]:
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "system_fingerprint": "fp_ollama",
            "choices": choices,
        }

    async for event in events:
        if isinstance(event, Die):
            return out.die()
        if isinstance(event, Error):
            if not out.started:
                return await openai_error(request, event.status, event.message)
            # The error line parses as an empty ChatResponse: its text is lost.
            empty = {"index": 0, "delta": {"content": ""}, "finish_reason": None}
            await out.write(sse_data(frame([empty], "")))
            return await out.finish()
        created = created or int(time.time())
        tool_calls_seen = tool_calls_seen or bool(event.tool_calls)
        if not event.done or event.has_output:
            delta = _openai_delta(event, first=not out.started)
            await out.write(sse_data(frame([{"index": 0, "delta": delta, "finish_reason": None}])))
        if event.done:
            reason = _finish_reason(event, tool_calls_seen)
            await out.write(sse_data(frame([{"index": 0, "delta": {}, "finish_reason": reason}])))
            if include_usage:
                await out.write(sse_data({**frame([]), "usage": _openai_usage(event)}))
            await out.write(b"data: [DONE]\n\n")
    return await out.finish()


def _openai_completion(chunk: Chunk, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": chunk.content}
    if chunk.thinking:
        message["reasoning"] = chunk.thinking
    if chunk.tool_calls:
        message["tool_calls"] = openai_tool_calls(chunk.tool_calls)
    return {
        "id": f"chatcmpl-{random.randrange(999)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(chunk, bool(chunk.tool_calls)),
            }
        ],
        "usage": _openai_usage(chunk),
    }


async def _openai_text_stream(
    request: web.Request, events: AsyncIterator[Event], model: str, include_usage: bool
) -> web.StreamResponse:
    """/v1/completions SSE: the done chunk carries text "" and the finish reason."""
    out = LazyStream(request, {"Content-Type": "text/event-stream"})
    chunk_id = f"cmpl-{random.randrange(999)}"
    created = 0
    zero = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    def frame(choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": chunk_id,
            "object": "text_completion",
            "created": created,
            "choices": choices,
            "model": model,
            "system_fingerprint": "fp_ollama",
        }

    async for event in events:
        if isinstance(event, Die):
            return out.die()
        if isinstance(event, Error):
            if not out.started:
                return await openai_error(request, event.status, event.message)
            return await out.finish()
        created = created or int(time.time())
        reason = event.done_reason if event.done else None
        chunk = frame([{"text": event.content, "index": 0, "finish_reason": reason}])
        await out.write(sse_data({**chunk, "usage": zero} if include_usage else chunk))
        if event.done:
            if include_usage:
                await out.write(sse_data({**frame([]), "usage": _openai_usage(event)}))
            await out.write(b"data: [DONE]\n\n")
    return await out.finish()


def _openai_text_completion(chunk: Chunk, model: str) -> dict[str, Any]:
    return {
        "id": f"cmpl-{random.randrange(999)}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [{"text": chunk.content, "index": 0, "finish_reason": chunk.done_reason}],
        "usage": _openai_usage(chunk),
    }


async def chat_completions(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    think = body.get("reasoning_effort") != "none"
    name, run = fake.compat_run(body, start_ns, think=think, chat=True)
    events = fake.produce(run, context=False)
    if body.get("stream") is True:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await _openai_chat_stream(request, events, name, include_usage)
    result = await fold_or_refuse(request, events)
    return (
        result
        if isinstance(result, web.StreamResponse)
        else await encoder_json(request, _openai_completion(result, name))
    )


async def completions(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    if not isinstance(body.get("prompt"), str):
        raise Refused(400, "invalid type for 'prompt' field: expected a string")
    name, run = fake.compat_run(body, start_ns, think=True, chat=False)
    events = fake.produce(run, context=False)
    if body.get("stream") is True:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await _openai_text_stream(request, events, name, include_usage)
    result = await fold_or_refuse(request, events)
    return (
        result
        if isinstance(result, web.StreamResponse)
        else await encoder_json(request, _openai_text_completion(result, name))
    )


async def embeddings(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    name = str(body.get("model") or "")
    model = fake.require(name, 'model "{name}" not found, try pulling it first')
    inputs = body.get("input")
    inputs = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise Refused(400, "invalid input")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise Refused(400, f"invalid encoding format: {encoding}")
    run = fake.run(model, compat_body(body), start_ns, think=False, chat=False)
    await fake.embed_phases(run)
    data = []
    for index, text in enumerate(inputs):
        vector = embedding(model, text)
        packed: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append(
            {
                "object": "embedding",
                "embedding": packed if encoding == "base64" else vector,
                "index": index,
            }
        )
    tokens = sum(token_estimate(t) for t in inputs)
    if fake.context_rules:  # the same EmbedHandler serves /v1/embeddings (routes.go)
        tokens = sum(embed_counts(model, compat_body(body), inputs, None, run.default_ctx))
    reply = {
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return await encoder_json(request, reply)


def _model_entry(model: FakeModel) -> dict[str, Any]:
    namespace = model.name.split("/")[-2] if "/" in model.name else "library"
    return {
        "id": model.name,
        "object": "model",
        "created": int(model.modified_at.timestamp()),
        "owned_by": namespace,
    }


async def list_models(fake: Engine, request: web.Request) -> web.StreamResponse:
    data = [_model_entry(m) for m in fake.listed()] or None
    return await encoder_json(request, {"object": "list", "data": data})


async def show_model(fake: Engine, request: web.Request) -> web.StreamResponse:
    name = request.match_info["model"]
    model = fake.require(name, 'model "{name}" not found')
    return await encoder_json(request, _model_entry(model))


ROUTES: list[Route] = [
    ("POST", "/v1/chat/completions", chat_completions),
    ("POST", "/v1/completions", completions),
    ("POST", "/v1/embeddings", embeddings),
    ("GET", "/v1/models", list_models),
    ("GET", "/v1/models/{model}", show_model),
]

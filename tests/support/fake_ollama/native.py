"""The native API: status and listing routes, generate and chat, embeddings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, TypeVar

import orjson
from aiohttp import web

from tests.support.fake_ollama.context import (
    EMBED_ERROR,
    count,
    embed_counts,
    parse_version,
    runtime_context,
)
from tests.support.fake_ollama.engine import Engine, Route
from tests.support.fake_ollama.gojson import epoch_ns, go_json, go_time
from tests.support.fake_ollama.incoming import json_body
from tests.support.fake_ollama.models import FakeModel, embedding, normalized, token_estimate
from tests.support.fake_ollama.replies import LazyStream, Refused, die, gin_json, send
from tests.support.fake_ollama.scheduler import FOREVER_NS
from tests.support.fake_ollama.script import Chunk, Die, Error, Run, fold

T = TypeVar("T")


async def native_error(
    request: web.Request, status: int, message: str, *, streamed: bool = False
) -> web.StreamResponse:
    """`{"error": message}`, as gin's c.JSON writes it."""
    if streamed:
        # streamResponse sets a bare application/json before c.JSON when nothing was written yet.
        return await send(request, status, go_json({"error": message}), "application/json")
    return await gin_json(request, {"error": message}, status)


def _generate_object(model: str, chunk: Chunk) -> dict[str, Any]:
    """GenerateResponse in Go's field order, zero fields omitted."""
    obj: dict[str, Any] = {
        "model": model,
        "created_at": chunk.created_at,
        "response": chunk.content,
    }
    if chunk.thinking:
        obj["thinking"] = chunk.thinking
    obj["done"] = chunk.done
    if chunk.done_reason:
        obj["done_reason"] = chunk.done_reason
    if chunk.context:
        obj["context"] = chunk.context
    obj.update(chunk.metrics)
    if chunk.tool_calls:
        obj["tool_calls"] = chunk.tool_calls
    return obj


def _chat_object(model: str, chunk: Chunk) -> dict[str, Any]:
    """ChatResponse in Go's field order; message.content is always present."""
    message: dict[str, Any] = {"role": "assistant", "content": chunk.content}
    if chunk.thinking:
        message["thinking"] = chunk.thinking
    if chunk.tool_calls:
        message["tool_calls"] = chunk.tool_calls
    obj: dict[str, Any] = {"model": model, "created_at": chunk.created_at, "message": message}
    obj["done"] = chunk.done
    if chunk.done_reason:
        obj["done_reason"] = chunk.done_reason
    obj.update(chunk.metrics)
    return obj


async def write_ndjson(
    request: web.Request,
    events: AsyncIterator[T | Error | Die],
    render: Callable[[T], Any],
) -> web.StreamResponse:
    """Ollama's streamResponse: one flushed line per object; an error is a status or a line."""
    out = LazyStream(request, {"Content-Type": "application/x-ndjson"})
    async for event in events:
        if isinstance(event, Die):
            return out.die()
        if isinstance(event, Error):
            if not out.started:
                return await native_error(request, event.status, event.message, streamed=True)
            await out.write(go_json({"error": event.message}) + b"\n")
            break
        await out.write(go_json(render(event)) + b"\n")
    return await out.finish()


async def root(fake: Engine, request: web.Request) -> web.StreamResponse:
    return await send(request, 200, b"Ollama is running", "text/plain; charset=utf-8")


async def version(fake: Engine, request: web.Request) -> web.StreamResponse:
    return await gin_json(request, {"version": fake.version})


LISTED_FACTS: Final = (0, 30, 0)
"""From v0.30.0 (at the latest) /api/tags comes from a model list cache
(server/model_list_cache.go `buildModelListSummary`) that adds `details.context_length` and
`details.embedding_length` (omitempty, from the GGUF) and `capabilities` (omitempty); v0.24.0
lists neither. The releases between (0.25–0.29) are not on the Go module proxy, so the first
that has them is not known here: seen on v0.30.0 by the real tier's parity test."""


def listed(fake: Engine, m: FakeModel) -> dict[str, Any]:
    """One /api/tags entry (api.ListModelResponse) as the fake's version writes it."""
    entry: dict[str, Any] = {
        "name": m.name,
        "model": m.name,
        "modified_at": go_time(epoch_ns(m.modified_at), local=True),
        "size": m.size,
        "digest": m.digest,
        "details": m.details,
    }
    if parse_version(fake.version) < LISTED_FACTS:
        return entry
    architecture = m.model_info.get("general.architecture", "")
    lengths = {
        "context_length": m.model_info.get(f"{architecture}.context_length", 0),
        "embedding_length": m.model_info.get(f"{architecture}.embedding_length", 0),
    }
    entry["details"] = {**m.details, **{k: v for k, v in lengths.items() if v}}
    if m.capabilities:
        entry["capabilities"] = m.capabilities
    return entry


async def tags(fake: Engine, request: web.Request) -> web.StreamResponse:
    return await gin_json(request, {"models": [listed(fake, m) for m in fake.listed()]})


async def ps(fake: Engine, request: web.Request) -> web.StreamResponse:
    if fake.scheduler is not None:
        fake.scheduler.sweep()
    running = sorted(
        ((fake.models[name], state) for name, state in fake.loaded.items() if name in fake.models),
        key=lambda pair: pair[1].expires_at_ns,
        reverse=True,
    )
    entries = [
        {
            "name": m.name,
            "model": m.name,
            "size": m.size,
            "digest": m.digest,
            "details": m.details,
            "expires_at": go_time(
                state.expires_at_ns or min(time.time_ns() + state.session_ns, FOREVER_NS),
                local=True,
            ),
            "size_vram": m.size_vram,
            "context_length": state.context_length,
        }
        for m, state in running
    ]
    return await gin_json(request, {"models": entries})


async def show(fake: Engine, request: web.Request) -> web.StreamResponse:
    """`GetModelInfo` (server/routes.go): api.ShowResponse in its field order, each string
    field `omitempty` (a bare GGUF import has no license, a native-template model no
    template), `model_info` always there, and a GGUF's `tensors` listed verbose or not
    (`getModelData` returns them either way; only arrays in `model_info` wait for verbose)."""
    body = await json_body(request)
    name = body.get("model") or body.get("name")
    model = fake.require(name, "model '{name}' not found")
    verbose = body.get("verbose") is True
    # Without verbose, Ollama reads no GGUF array elements: non-empty arrays print null.
    info = {
        k: (None if isinstance(v, list) and v and not verbose else v)
        for k, v in sorted(model.model_info.items())
    }
    strings = {
        "license": model.license,
        "modelfile": modelfile(model),
        "parameters": model.parameters,
        "template": model.template,
        "system": model.system,
    }
    reply: dict[str, Any] = {key: value for key, value in strings.items() if value}
    reply["details"] = model.details
    reply["model_info"] = info
    reply["tensors"] = model.tensors
    reply["capabilities"] = model.capabilities
    reply["modified_at"] = go_time(epoch_ns(model.modified_at), local=True)
    return await gin_json(request, reply)


def modelfile(model: FakeModel) -> str:
    """`ollama show --modelfile`: the header `GetModelInfo` writes, then `Model.String`
    (server/images.go) in its order, each command as `parser.Command.String` quotes it."""
    lines = [
        '# Modelfile generated by "ollama show"',
        "# To build a new Modelfile based on this, replace FROM with:",
        f"# FROM {model.name}",
        "",
        f"FROM /root/.ollama/models/blobs/sha256-{model.blob}",
    ]
    if model.template:
        lines.append(f"TEMPLATE {go_quote(model.template)}")
    if model.system:
        lines.append(f"SYSTEM {go_quote(model.system)}")
    for parameter in model.parameters.splitlines():
        key, _, shown = parameter.partition(" ")  # the value as %#v prints it
        value = shown.strip()
        if value.startswith('"'):
            value = orjson.loads(value)
        lines.append(f"PARAMETER {key} {go_quote(value)}")
    if model.license:
        lines.append(f"LICENSE {go_quote(model.license)}")
    return "\n".join(lines) + "\n"


def go_quote(text: str) -> str:
    """parser/parser.go `quote`: quoted only when multi-line or space-padded."""
    if "\n" in text or text.startswith(" ") or text.endswith(" "):
        return f'"""{text}"""' if '"' in text else f'"{text}"'
    return text


async def generate(fake: Engine, request: web.Request) -> web.StreamResponse:
    return await _native(fake, request, chat=False)


async def chat(fake: Engine, request: web.Request) -> web.StreamResponse:
    return await _native(fake, request, chat=True)


async def _native(fake: Engine, request: web.Request, *, chat: bool) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    name = str(body.get("model") or "")
    model = fake.require(name, "model '{name}' not found")
    if "completion" not in model.capabilities:
        raise Refused(400, f'"{name}" does not support {"chat" if chat else "generate"}')
    think = body.get("think")
    if think not in (None, False) and "thinking" not in model.capabilities:
        raise Refused(400, f'"{name}" does not support thinking')
    if not chat and body.get("raw") and any(body.get(k) for k in ("context", "template", "system")):
        raise Refused(400, "raw mode does not support template, system, or context")
    run = fake.run(model, body, start_ns, think=think is not False, chat=chat)
    render = _chat_object if chat else _generate_object
    if not body.get("messages" if chat else "prompt"):
        return await _load_reply(fake, request, run, lambda c: render(name, c))
    events = fake.produce(run, context=not chat and not body.get("raw"))
    if body.get("stream") is not False:
        return await write_ndjson(request, events, lambda c: render(name, c))
    result = await fold(events)
    if isinstance(result, Die):
        return die(request, web.StreamResponse())
    if isinstance(result, Error):
        return await native_error(request, result.status, result.message)
    return await gin_json(request, render(name, result))


async def _load_reply(
    fake: Engine, request: web.Request, run: Run, render: Callable[[Chunk], dict[str, Any]]
) -> web.StreamResponse:
    """An empty prompt or message list loads the model; with keep_alive 0 unloads it."""
    if run.keep_alive == 0:
        if fake.scheduler is not None:
            fake.scheduler.unload_now(run.model)
        else:
            fake.loaded.pop(run.model.name, None)
        reason = "unload"
    elif fake.scheduler is not None:
        await fake.scheduler.acquire(run)
        fake.scheduler.release(run)
        reason = "load"
    else:
        await asyncio.sleep(fake.script.load_delay)
        fake.mark_loaded(run)
        reason = "load"
    chunk = Chunk(created_at=go_time(time.time_ns()), done=True, done_reason=reason)
    return await gin_json(request, render(chunk))


async def embed(fake: Engine, request: web.Request) -> web.StreamResponse:
    start_ns = time.monotonic_ns()
    body = await json_body(request)
    name = str(body.get("model") or "")
    model = fake.require(name, 'model "{name}" not found, try pulling it first')
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs] if inputs else []
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise Refused(400, "invalid input type")
    run = fake.run(model, body, start_ns, think=False, chat=False)
    loaded_ns = await fake.embed_phases(run)
    counts = [token_estimate(t) for t in inputs]
    if fake.context_rules:
        counts = embed_counts(model, body, inputs, run.num_ctx, run.default_ctx)
    if not inputs:
        return await gin_json(request, {"model": name, "embeddings": []})
    dimensions = body.get("dimensions")
    vectors = [embedding(model, text) for text in inputs]
    if isinstance(dimensions, int) and dimensions > 0:
        vectors = [normalized(v[:dimensions]) for v in vectors]
    reply = {
        "model": name,
        "embeddings": vectors,
        "total_duration": time.monotonic_ns() - start_ns,
        "load_duration": loaded_ns - start_ns,
        "prompt_eval_count": sum(counts),
    }
    return await gin_json(request, {k: v for k, v in reply.items() if v})


async def embeddings(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    name = str(body.get("model") or "")
    model = fake.require(name, 'model "{name}" not found, try pulling it first')
    run = fake.run(model, body, time.monotonic_ns(), think=False, chat=False)
    await fake.embed_phases(run)
    prompt = body.get("prompt") or ""
    limit = runtime_context(model, run.num_ctx, run.default_ctx)
    if fake.context_rules and count(prompt) + 2 > limit:
        # No truncation on the legacy route: llama-server's refusal, wrapped in a 500
        # (`routes.go` EmbeddingsHandler, 1084-1089; F§1 #13).
        raise Refused(500, EMBED_ERROR)
    # The legacy route widens each float32 to float64, so the long digits show.
    vector = [float(v) for v in embedding(model, prompt)] if prompt else []
    return await gin_json(request, {"embedding": vector})


ROUTES: list[Route] = [
    ("GET HEAD", "/", root),
    ("GET HEAD", "/api/version", version),
    ("GET HEAD", "/api/tags", tags),
    ("GET", "/api/ps", ps),
    ("POST", "/api/show", show),
    ("POST", "/api/generate", generate),
    ("POST", "/api/chat", chat),
    ("POST", "/api/embed", embed),
    ("POST", "/api/embeddings", embeddings),
]

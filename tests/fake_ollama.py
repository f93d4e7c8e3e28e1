"""A fake Ollama server for tests, built from the documented wire protocol (not from Ollama itself).

Everything here follows ../shared/research/ollama-protocol.md (section numbers in comments): the
route table, Go's `json.Marshal` byte layout, headers held back until the first chunk, timing
fields that report the delays a test injects through `Script`, the error shapes and the
compatibility layers under `/v1`. It is a fake: no model runs, output is scripted, and where the
document is silent the choice made is the simplest one consistent with it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import json
import math
import random
import re
import secrets
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import pytest_asyncio
from aiohttp import web
from pytest_aiohttp import AiohttpServer

# ---------------------------------------------------------------------------------------------
# Go's encoding/json and time formatting, byte for byte


class F32(float):
    """A number Go holds as float32 (embeddings): printed with float32's shortest digits."""


def f32(value: float) -> F32:
    """Round to the nearest float32, as a Go float32 conversion does."""
    return F32(struct.unpack("<f", struct.pack("<f", value))[0])


def go_json(value: Any) -> bytes:
    """Serialize like Go's json.Marshal: compact, in the given key order, `<>&` escaped."""
    return _encode(value).encode()


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value, 32 if isinstance(value, F32) else 64)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_go_string(k)}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__}")


_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _go_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).translate(_GO_ESCAPES)


def _go_float(value: float, bits: int) -> str:
    digits = Decimal(_shortest_f32(value) if bits == 32 else repr(value)).normalize()
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        return format(digits, "f")
    # Go's 'e' form: shortest mantissa, exponent without a leading zero (e-07 becomes e-7).
    sign, numerals, exponent = digits.as_tuple()
    text = "".join(map(str, numerals))
    power = len(text) - 1 + int(exponent)
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    exp = f"{'-' if power < 0 else '+'}{abs(power):02d}" if power >= 0 else f"-{abs(power)}"
    return f"{'-' if sign else ''}{mantissa}e{exp}"


def _shortest_f32(value: float) -> str:
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if f32(float(text)) == value:
            return text
    return repr(value)


def go_time(epoch_ns: int, *, local: bool = False) -> str:
    """RFC3339Nano as Go prints it: trailing zeros of the fraction dropped, `Z` for UTC."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if local:
        moment = moment.astimezone()
    offset = int((moment.utcoffset() or timedelta(0)).total_seconds()) // 60
    zone = (
        "Z"
        if offset == 0
        else f"{'+' if offset > 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    )
    fraction = f".{nanos:09d}".rstrip("0").rstrip(".")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + zone


def _epoch_ns(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


# ---------------------------------------------------------------------------------------------
# What tests control and inspect


@dataclass
class Script:
    """How the next generate/chat (native and /v1) replies behave.

    Embeddings use the delays and `status_error` too. Phases run in Ollama's order: load,
    queue (a parallel-slot wait no field reports), prefill, then one output chunk every
    `token_delay`. Output chunks are the thinking pieces, then the tokens, then (chat) one
    tool-call chunk.
    """

    tokens: list[str] = field(default_factory=lambda: ["The", " sky", " is", " blue", "."])
    thinking: list[str] = field(default_factory=list)
    load_delay: float = 0.0
    queue_delay: float = 0.0
    prefill_delay: float = 0.0
    token_delay: float = 0.0
    prompt_eval_count: int = 26
    prompt_eval_cached_count: int | None = None
    eval_count: int | None = None
    done_reason: str = "stop"
    error_after: int | None = None
    error_message: str = "an error was encountered while running the model"
    status_error: tuple[int, str] | None = None
    no_final: bool = False
    die_after: int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_calls_on_final: bool = False
    context: list[int] | None = None
    zero_fields: tuple[str, ...] = ()


def model_details(family: str, parameter_size: str, quantization: str) -> dict[str, Any]:
    """A ModelDetails object in Go's field order."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": parameter_size,
        "quantization_level": quantization,
    }


@dataclass
class FakeModel:
    """One installed model: what /api/tags, /api/ps and /api/show report about it."""

    name: str
    digest: str
    size: int
    details: dict[str, Any]
    model_info: dict[str, Any]
    capabilities: list[str] = field(default_factory=lambda: ["completion"])
    size_vram: int = 0
    context_length: int = 4096
    modified_at: datetime = field(default_factory=lambda: datetime(2025, 9, 1, 12, 0, tzinfo=UTC))
    template: str = "{{ .Prompt }}"
    parameters: str = ""
    license: str = ""

    @property
    def embedding_length(self) -> int:
        architecture = self.model_info.get("general.architecture", "")
        return int(self.model_info.get(f"{architecture}.embedding_length", 384))


@dataclass
class LoadedModel:
    """A model /api/ps shows: until when it stays, with which runtime context."""

    expires_at_ns: int
    context_length: int


@dataclass
class Received:
    """One request as it arrived: raw header pairs in order and case, body bytes read."""

    method: str
    path_qs: str
    headers: list[tuple[str, str]]
    body: bytes = b""


def _default_models() -> dict[str, FakeModel]:
    vocab = ["<|begin_of_text|>", "The", "Ġsky", "Ġis", "Ġblue", "."]
    models = [
        FakeModel(
            name="llama3.2:latest",
            digest="a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
            size=2019393189,
            size_vram=2019393189,
            details=model_details("llama", "3.2B", "Q4_K_M"),
            capabilities=["completion", "tools"],
            model_info={
                "general.architecture": "llama",
                "general.file_type": 15,
                "general.parameter_count": 3212749888,
                "general.quantization_version": 2,
                "llama.attention.head_count": 24,
                "llama.attention.head_count_kv": 8,
                "llama.block_count": 28,
                "llama.context_length": 131072,
                "llama.embedding_length": 3072,
                "llama.vocab_size": 128256,
                "tokenizer.ggml.bos_token_id": 128000,
                "tokenizer.ggml.eos_token_id": 128009,
                "tokenizer.ggml.merges": ["Ġ s", "Ġ b"],
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": "llama-bpe",
                "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
                "tokenizer.ggml.tokens": vocab,
            },
            template="<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>",
            parameters='stop                           "<|eot_id|>"',
            license="LLAMA 3.2 COMMUNITY LICENSE AGREEMENT",
        ),
        FakeModel(
            name="qwen3:8b",
            digest="500a1f067a9f782620b40bee6f7b0c89e17ae61f686b92c24933e4ca4b2b8b41",
            size=5225387923,
            size_vram=5225387923,
            details=model_details("qwen3", "8.2B", "Q4_K_M"),
            capabilities=["completion", "tools", "thinking"],
            model_info={
                "general.architecture": "qwen3",
                "general.parameter_count": 8190735360,
                "qwen3.context_length": 40960,
                "qwen3.embedding_length": 4096,
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.tokens": vocab,
                "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
            },
        ),
        FakeModel(
            name="all-minilm:latest",
            digest="1b226e2802dbb772b5fc32a58f103ca1804ef7501331012de126ab22f67475ef",
            size=45960996,
            size_vram=45960996,
            details=model_details("bert", "23M", "F16"),
            capabilities=["embedding"],
            context_length=256,
            model_info={
                "general.architecture": "bert",
                "general.parameter_count": 22565376,
                "bert.context_length": 512,
                "bert.embedding_length": 384,
                "tokenizer.ggml.model": "bert",
                "tokenizer.ggml.tokens": ["[PAD]", "[CLS]", "[SEP]"],
            },
        ),
    ]
    return {model.name: model for model in models}


# ---------------------------------------------------------------------------------------------
# Names, hosts, durations


def canonical_name(name: str) -> str:
    """Ollama's short form: registry host and `library/` implied, tag `latest` by default."""
    short = name.removeprefix("registry.ollama.ai/").removeprefix("library/")
    last = short.rsplit("/", 1)[-1]
    return short if ":" in last else short + ":latest"


def _host_part(value: str) -> str:
    """The host of a Host header as Go's net.SplitHostPort sees it, or the raw value on error."""
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 and value[end + 1 : end + 2] == ":" else value
    return value.split(":")[0] if value.count(":") == 1 else value


_GO_PRIVATE = [
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
]


def host_allowed(host_header: str) -> bool:
    """Ollama's Host rule on a loopback listener (§7.1)."""
    host = _host_part(host_header)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address is not None and (
        address.is_loopback or address.is_unspecified or any(address in net for net in _GO_PRIVATE)
    ):
        return True
    host = host.lower()
    return host in ("", "localhost", socket.gethostname().lower()) or host.endswith(
        (".localhost", ".local", ".internal")
    )


_LOCAL_ORIGINS = tuple(
    f"{scheme}://{host}"
    for scheme in ("http", "https")
    for host in ("localhost", "127.0.0.1", "0.0.0.0")
)


def origin_allowed(origin: str, host: str) -> bool:
    """gin-contrib/cors with Ollama's default origins (§7.2); same-origin always passes."""
    if origin in (f"http://{host}", f"https://{host}") or origin in _LOCAL_ORIGINS:
        return True
    return origin.startswith(
        (
            *(o + ":" for o in _LOCAL_ORIGINS),
            "app://",
            "file://",
            "tauri://",
            "vscode-webview://",
            "vscode-file://",
        )
    )


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "m": 60,
    "h": 3600,
}


def keep_alive_seconds(value: Any) -> float:
    """`keep_alive` as seconds (a number, or a Go duration string); negative means forever."""
    if value is None:
        return 300.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.lstrip("+-") == "0":
        seconds = 0.0
    elif (
        isinstance(value, str)
        and (parts := _DURATION_PART.findall(body := value.lstrip("+-")))
        and "".join(n + u for n, u in parts) == body
    ):
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
        seconds = -seconds if value.startswith("-") else seconds
    else:
        raise _Refused(400, f'time: invalid duration "{value}"')
    return math.inf if seconds < 0 else seconds


def _token_estimate(text: str) -> int:
    # A word-piece count plus the two special tokens an embedding model adds (F8: 8 for
    # "Why is the sky blue?").
    return len(re.findall(r"\w+|[^\w\s]", text)) + 2


def _embedding(model: FakeModel, text: str) -> list[F32]:
    """A deterministic, L2-normalised vector, as Ollama returns (§5)."""
    rng = random.Random(hashlib.sha256(f"{model.name}\0{text}".encode()).digest())
    raw = [rng.gauss(0.0, 1.0) for _ in range(model.embedding_length)]
    return _normalized(raw)


def _normalized(values: Sequence[float]) -> list[F32]:
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [f32(v / norm) for v in values]


# ---------------------------------------------------------------------------------------------
# Replies


class _Refused(Exception):
    """A request answered with an error status before any output; each route family shapes it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _send(
    request: web.Request, status: int, body: bytes, content_type: str | None
) -> web.StreamResponse:
    """Send a fixed body as Go's net/http does: Content-Length up to 2048 bytes, else chunked."""
    headers = {"Content-Type": content_type} if content_type else {}
    if len(body) <= 2048 or request.method == "HEAD":
        return web.Response(status=status, body=body or None, headers=headers)
    response = web.StreamResponse(status=status, headers=headers)
    await response.prepare(request)
    await response.write(body)
    await response.write_eof()
    return response


async def _gin_json(request: web.Request, value: Any, status: int = 200) -> web.StreamResponse:
    """gin's c.JSON: charset in the type, no trailing newline."""
    return await _send(request, status, go_json(value), "application/json; charset=utf-8")


async def _encoder_json(request: web.Request, value: Any, status: int = 200) -> web.StreamResponse:
    """A /v1 writer's json.NewEncoder(...).Encode: bare type, trailing newline."""
    return await _send(request, status, go_json(value) + b"\n", "application/json")


async def _native_error(
    request: web.Request, status: int, message: str, *, streamed: bool = False
) -> web.StreamResponse:
    if streamed:
        # streamResponse sets a bare application/json before c.JSON when nothing was written yet.
        return await _send(request, status, go_json({"error": message}), "application/json")
    return await _gin_json(request, {"error": message}, status)


def _openai_error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _openai_error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    return await _encoder_json(request, _openai_error_body(status, message), status)


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


async def _anthropic_error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    body = {
        "type": "error",
        "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": "req_" + secrets.token_hex(12),
    }
    return await _gin_json(request, body, status)


ErrorReply = Callable[[web.Request, int, str], Awaitable[web.StreamResponse]]


class _LazyStream:
    """A streamed reply whose status line and headers leave with its first bytes (§2.2)."""

    def __init__(self, request: web.Request, headers: dict[str, str]) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=headers)

    @property
    def started(self) -> bool:
        return self.response.prepared

    async def write(self, data: bytes) -> None:
        if not self.response.prepared:
            await self.response.prepare(self.request)
        await self.response.write(data)

    async def finish(self) -> web.StreamResponse:
        if not self.response.prepared:
            await self.response.prepare(self.request)
        await self.response.write_eof()
        return self.response

    def die(self) -> web.StreamResponse:
        """Close the TCP connection mid-reply, as a crashing server would."""
        return _die(self.request, self.response)


def _die(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    # What was written is flushed, then the socket closes without the terminating chunk;
    # aiohttp's own write_eof then meets a closed transport, which it treats as a disconnect.
    if request.transport is not None:
        request.transport.close()
    return response


def _sse_data(payload: Any) -> bytes:
    return b"data: " + go_json(payload) + b"\n\n"


def _sse_event(kind: str, payload: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + go_json(payload) + b"\n\n"


def _sorted_map(value: Any) -> Any:
    """Go prints map[string]any keys sorted, at every depth."""
    if isinstance(value, dict):
        return {k: _sorted_map(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_map(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# The generation pipeline: scripted native chunks, shaped per route


@dataclass
class _Chunk:
    """One native generate/chat object before a route shapes it."""

    created_at: str = ""
    content: str = ""
    thinking: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    done: bool = False
    done_reason: str = ""
    context: list[int] | None = None
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def has_output(self) -> bool:
        return bool(self.content or self.thinking or self.tool_calls)


@dataclass
class _Error:
    """An error the runner reports; a status line if nothing was written yet, else a line."""

    message: str
    status: int = 500


class _Die:
    """The connection is cut here."""


_Event = _Chunk | _Error | _Die
T = TypeVar("T")


@dataclass
class _Run:
    """One inference request as the pipeline needs it."""

    model: FakeModel
    start_ns: int
    keep_alive: float
    num_ctx: int | None
    think: bool
    chat: bool


def _tool_calls(calls: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scripted calls in the shape the current server sends (id, then function with index)."""
    shaped = []
    for index, call in enumerate(calls):
        function = call.get("function", call)
        shaped.append(
            {
                "id": call.get("id")
                or "call_" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=8)),
                "function": {
                    "index": index,
                    "name": function["name"],
                    "arguments": function.get("arguments", {}),
                },
            }
        )
    return shaped


def _interruption(script: Script, count: int) -> _Error | _Die | None:
    if script.die_after == count:
        return _Die()
    if script.error_after == count:
        return _Error(script.error_message)
    return None


def _pieces(script: Script, run: _Run) -> list[_Chunk]:
    pieces = [_Chunk(thinking=t) for t in script.thinking] if run.think else []
    pieces += [_Chunk(content=t) for t in script.tokens]
    if script.tool_calls and run.chat and not script.tool_calls_on_final:
        pieces.append(_Chunk(tool_calls=_tool_calls(script.tool_calls)))
    return pieces


async def _fold(events: AsyncIterator[_Event]) -> _Event:
    """What a non-streaming reply carries: the last chunk with the output concatenated (§2.5)."""
    content: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    last = _Chunk(created_at=go_time(time.time_ns()))
    async for event in events:
        if not isinstance(event, _Chunk):
            return event
        content.append(event.content)
        thinking.append(event.thinking)
        calls += event.tool_calls or []
        last = event
    return replace(
        last, content="".join(content), thinking="".join(thinking), tool_calls=calls or None
    )


def _generate_object(model: str, chunk: _Chunk) -> dict[str, Any]:
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


def _chat_object(model: str, chunk: _Chunk) -> dict[str, Any]:
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


async def _write_ndjson(
    request: web.Request,
    events: AsyncIterator[T | _Error | _Die],
    render: Callable[[T], Any],
) -> web.StreamResponse:
    """Ollama's streamResponse: one flushed line per object; an error is a status or a line."""
    out = _LazyStream(request, {"Content-Type": "application/x-ndjson"})
    async for event in events:
        if isinstance(event, _Die):
            return out.die()
        if isinstance(event, _Error):
            if not out.started:
                return await _native_error(request, event.status, event.message, streamed=True)
            await out.write(go_json({"error": event.message}) + b"\n")
            break
        await out.write(go_json(render(event)) + b"\n")
    return await out.finish()


def _finish_reason(chunk: _Chunk, tool_calls_seen: bool) -> str:
    if tool_calls_seen and chunk.done_reason == "stop":
        return "tool_calls"
    return chunk.done_reason


def _openai_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _openai_usage(chunk: _Chunk) -> dict[str, Any]:
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


def _openai_delta(chunk: _Chunk, first: bool) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    delta["content"] = chunk.content
    if chunk.thinking:
        delta["reasoning"] = chunk.thinking
    if chunk.tool_calls:
        delta["tool_calls"] = _openai_tool_calls(chunk.tool_calls)
    return delta


async def _openai_chat_stream(
    request: web.Request, events: AsyncIterator[_Event], model: str, include_usage: bool
) -> web.StreamResponse:
    """/v1/chat/completions SSE (§6.2): deltas, a finish chunk, optional usage, [DONE]."""
    out = _LazyStream(request, {"Content-Type": "text/event-stream"})
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
        if isinstance(event, _Die):
            return out.die()
        if isinstance(event, _Error):
            if not out.started:
                return await _openai_error(request, event.status, event.message)
            # The error line parses as an empty ChatResponse: its text is lost (§6.1).
            empty = {"index": 0, "delta": {"content": ""}, "finish_reason": None}
            await out.write(_sse_data(frame([empty], "")))
            return await out.finish()
        created = created or int(time.time())
        tool_calls_seen = tool_calls_seen or bool(event.tool_calls)
        if not event.done or event.has_output:
            delta = _openai_delta(event, first=not out.started)
            await out.write(_sse_data(frame([{"index": 0, "delta": delta, "finish_reason": None}])))
        if event.done:
            reason = _finish_reason(event, tool_calls_seen)
            await out.write(_sse_data(frame([{"index": 0, "delta": {}, "finish_reason": reason}])))
            if include_usage:
                await out.write(_sse_data({**frame([]), "usage": _openai_usage(event)}))
            await out.write(b"data: [DONE]\n\n")
    return await out.finish()


def _openai_completion(chunk: _Chunk, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": chunk.content}
    if chunk.thinking:
        message["reasoning"] = chunk.thinking
    if chunk.tool_calls:
        message["tool_calls"] = _openai_tool_calls(chunk.tool_calls)
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
    request: web.Request, events: AsyncIterator[_Event], model: str, include_usage: bool
) -> web.StreamResponse:
    """/v1/completions SSE (§6.3): the done chunk carries text "" and the finish reason."""
    out = _LazyStream(request, {"Content-Type": "text/event-stream"})
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
        if isinstance(event, _Die):
            return out.die()
        if isinstance(event, _Error):
            if not out.started:
                return await _openai_error(request, event.status, event.message)
            return await out.finish()
        created = created or int(time.time())
        reason = event.done_reason if event.done else None
        chunk = frame([{"text": event.content, "index": 0, "finish_reason": reason}])
        await out.write(_sse_data({**chunk, "usage": zero} if include_usage else chunk))
        if event.done:
            if include_usage:
                await out.write(_sse_data({**frame([]), "usage": _openai_usage(event)}))
            await out.write(b"data: [DONE]\n\n")
    return await out.finish()


def _openai_text_completion(chunk: _Chunk, model: str) -> dict[str, Any]:
    return {
        "id": f"cmpl-{random.randrange(999)}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [{"text": chunk.content, "index": 0, "finish_reason": chunk.done_reason}],
        "usage": _openai_usage(chunk),
    }


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
        payload = _sorted_map({**data, "type": kind, "sequence_number": self.sequence})
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

    def process(self, chunk: _Chunk) -> list[tuple[str, dict[str, Any]]]:
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
        for i, call in enumerate(_openai_tool_calls(calls)):
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

    def _completion(self, chunk: _Chunk) -> list[tuple[str, dict[str, Any]]]:
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
    def usage(chunk: _Chunk) -> dict[str, Any]:
        prompt = chunk.metrics.get("prompt_eval_count", 0)
        output = chunk.metrics.get("eval_count", 0)
        return {
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": prompt + output,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }


def _anthropic_stop_reason(chunk: _Chunk, tool_calls_seen: bool) -> str:
    if tool_calls_seen:
        return "tool_use"
    return {"stop": "end_turn", "length": "max_tokens"}.get(chunk.done_reason, "stop_sequence")


def _anthropic_input_estimate(body: dict[str, Any]) -> int:
    """message_start's input_tokens: characters / 4, the real count being unknown yet (§6.6)."""
    chars = len(body["system"]) if isinstance(body.get("system"), str) else 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(b.get("text", "")) for b in content if isinstance(b, dict))
    return chars // 4


class _AnthropicConverter:
    """Native chat chunks to Anthropic Messages events (§6.6)."""

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

    def process(self, chunk: _Chunk) -> list[tuple[str, dict[str, Any]]]:
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

    def message(self, chunk: _Chunk) -> dict[str, Any]:
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


async def _write_events(
    request: web.Request,
    events: AsyncIterator[_Event],
    convert: Callable[[_Chunk], list[tuple[str, dict[str, Any]]]],
    headers: dict[str, str],
    error: ErrorReply,
) -> web.StreamResponse:
    """`event:`/`data:` SSE; a mid-stream error just ends the stream without its terminal event."""
    out = _LazyStream(request, headers)
    async for event in events:
        if isinstance(event, _Die):
            return out.die()
        if isinstance(event, _Error):
            if not out.started:
                return await error(request, event.status, event.message)
            break
        for kind, payload in convert(event):
            await out.write(_sse_event(kind, payload))
    return await out.finish()


# ---------------------------------------------------------------------------------------------
# The server

_DIGEST = re.compile(r"^sha256[:-][0-9a-fA-F]{64}$")
_RECEIVED = web.RequestKey("received", Received)
_EARLY_READ_LIMIT = 256 << 10  # Go's maxPostHandlerReadBytes
_SSE_HEADERS = {"Content-Type": "text/event-stream"}
_ANTHROPIC_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
}


class FakeOllama:
    """An Ollama look-alike on aiohttp: state is public so tests can arrange and inspect it."""

    version: str = "0.33.0-rc2"

    def __init__(self, *, loopback_host_check: bool = True) -> None:
        self.loopback_host_check = loopback_host_check
        self.script = Script()
        self.models: dict[str, FakeModel] = _default_models()
        self.loaded: dict[str, LoadedModel] = {}
        self.blobs: dict[str, bytes] = {}
        self.received: list[Received] = []
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._gate], client_max_size=1 << 30)
        app.on_response_prepare.append(_drop_server_header)
        routes: list[
            tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]], ErrorReply]
        ] = [
            ("GET HEAD", "/", self._root, _native_error),
            ("GET HEAD", "/api/version", self._version, _native_error),
            ("GET HEAD", "/api/tags", self._tags, _native_error),
            ("GET", "/api/ps", self._ps, _native_error),
            ("POST", "/api/show", self._show, _native_error),
            ("POST", "/api/generate", self._generate, _native_error),
            ("POST", "/api/chat", self._chat, _native_error),
            ("POST", "/api/embed", self._embed, _native_error),
            ("POST", "/api/embeddings", self._embeddings, _native_error),
            ("POST", "/api/pull", self._pull, _native_error),
            ("POST", "/api/push", self._push, _native_error),
            ("POST", "/api/create", self._create, _native_error),
            ("POST", "/api/copy", self._copy, _native_error),
            ("DELETE", "/api/delete", self._delete, _native_error),
            ("HEAD", "/api/blobs/{digest}", self._head_blob, _native_error),
            ("POST", "/api/blobs/{digest}", self._post_blob, _native_error),
            ("POST", "/v1/chat/completions", self._openai_chat, _openai_error),
            ("POST", "/v1/completions", self._openai_completions, _openai_error),
            ("POST", "/v1/embeddings", self._openai_embeddings, _openai_error),
            ("GET", "/v1/models", self._openai_models, _openai_error),
            ("GET", "/v1/models/{model}", self._openai_model, _openai_error),
            ("POST", "/v1/responses", self._openai_responses, _openai_error),
            ("POST", "/v1/messages", self._anthropic_messages, _anthropic_error),
        ]
        for methods, path, handler, error in routes:
            for method in methods.split():
                app.router.add_route(method, path, _refusals(handler, error))
        return app

    # -- middleware: record, CORS, Host, router errors -----------------------------------------

    @web.middleware
    async def _gate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        received = Received(
            request.method,
            request.path_qs,
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers],
        )
        self.received.append(received)
        request[_RECEIVED] = received
        host = request.headers.get("Host", "")
        origin = request.headers.get("Origin")
        if origin is not None and not origin_allowed(origin, host):
            return web.Response(status=403)
        if self.loopback_host_check and not host_allowed(host):
            return web.Response(status=403)
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as exc:
            allow = ", ".join(sorted(exc.allowed_methods))
            return web.Response(
                status=405,
                body=b"405 method not allowed",
                headers={"Content-Type": "text/plain", "Allow": allow},
            )
        except web.HTTPNotFound:
            return web.Response(
                status=404, body=b"404 page not found", headers={"Content-Type": "text/plain"}
            )

    # -- helpers ----------------------------------------------------------------------------

    async def _read(self, request: web.Request) -> bytes:
        body = await request.read()
        request[_RECEIVED].body = body
        return body

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await self._read(request)
        if not raw:
            raise _Refused(400, "missing request body")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise _Refused(400, f"invalid character in JSON: {exc.args[0]}") from None
        if not isinstance(body, dict):
            raise _Refused(400, "json: cannot unmarshal array into Go value of type api.Request")
        return body

    def find(self, name: str) -> FakeModel | None:
        """The installed model a request names, matched case-insensitively as Ollama does."""
        wanted = canonical_name(name).lower()
        return next((m for k, m in self.models.items() if k.lower() == wanted), None)

    def _require(self, name: Any, message: str) -> FakeModel:
        if not name or not isinstance(name, str):
            raise _Refused(400, "model is required")
        model = self.find(name)
        if model is None:
            raise _Refused(404, message.format(name=name))
        return model

    def _run(
        self, model: FakeModel, body: dict[str, Any], start_ns: int, *, think: bool, chat: bool
    ) -> _Run:
        options: dict[str, Any] = body["options"] if isinstance(body.get("options"), dict) else {}
        num_ctx = options.get("num_ctx") if isinstance(options.get("num_ctx"), int) else None
        return _Run(
            model, start_ns, keep_alive_seconds(body.get("keep_alive")), num_ctx, think, chat
        )

    def _mark_loaded(self, run: _Run) -> None:
        lifetime_ns = (1 << 63) - 1 if math.isinf(run.keep_alive) else int(run.keep_alive * 1e9)
        self.loaded[run.model.name] = LoadedModel(
            expires_at_ns=time.time_ns() + lifetime_ns,
            context_length=run.num_ctx or run.model.context_length,
        )

    async def _produce(self, run: _Run, *, context: bool) -> AsyncIterator[_Event]:
        """The scripted reply with real phase timings (§2.8); the final object measures them."""
        script = self.script
        await asyncio.sleep(script.load_delay)
        loaded_ns = time.monotonic_ns()
        if script.status_error is not None:
            yield _Error(script.status_error[1], script.status_error[0])
            return
        self._mark_loaded(run)
        await asyncio.sleep(script.queue_delay)
        prefill_ns = time.monotonic_ns()
        await asyncio.sleep(script.prefill_delay)
        pieces = _pieces(script, run)
        first_ns = last_ns = 0
        for count, piece in enumerate(pieces):
            if (stop := _interruption(script, count)) is not None:
                yield stop
                return
            if count:
                await asyncio.sleep(script.token_delay)
            last_ns = time.monotonic_ns()
            first_ns = first_ns or last_ns
            yield replace(piece, created_at=go_time(time.time_ns()))
        if (stop := _interruption(script, len(pieces))) is not None:
            yield stop
            return
        if script.no_final:
            return
        yield self._final(
            run, pieces, context=context, phases=(loaded_ns, prefill_ns, first_ns, last_ns)
        )
        if run.keep_alive == 0:
            self.loaded.pop(run.model.name, None)

    def _final(
        self, run: _Run, pieces: list[_Chunk], *, context: bool, phases: tuple[int, int, int, int]
    ) -> _Chunk:
        script = self.script
        loaded_ns, prefill_ns, first_ns, last_ns = phases
        final_ns = time.monotonic_ns()
        on_final = bool(script.tool_calls) and (script.tool_calls_on_final or not run.chat)
        eval_count = script.eval_count if script.eval_count is not None else len(pieces) + on_final
        metrics = {
            "total_duration": final_ns - run.start_ns,
            "load_duration": loaded_ns - run.start_ns,
            "prompt_eval_count": script.prompt_eval_count,
            "prompt_eval_cached_count": script.prompt_eval_cached_count,
            "prompt_eval_duration": (first_ns or final_ns) - prefill_ns,
            "eval_count": eval_count,
            "eval_duration": last_ns - first_ns,
        }
        kept = {
            k: v
            for k, v in metrics.items()
            if v is not None
            and k not in script.zero_fields
            and (v != 0 or k == "prompt_eval_cached_count")
        }
        ids = (
            script.context
            if script.context is not None
            else list(range(1, script.prompt_eval_count + eval_count + 1))
        )
        return _Chunk(
            created_at=go_time(time.time_ns()),
            done=True,
            done_reason=script.done_reason,
            tool_calls=_tool_calls(script.tool_calls) if on_final and script.tool_calls else None,
            context=ids if context else None,
            metrics=kept,
        )

    # -- simple GET routes -------------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.StreamResponse:
        return await _send(request, 200, b"Ollama is running", "text/plain; charset=utf-8")

    async def _version(self, request: web.Request) -> web.StreamResponse:
        return await _gin_json(request, {"version": self.version})

    async def _tags(self, request: web.Request) -> web.StreamResponse:
        models = sorted(self.models.values(), key=lambda m: m.modified_at, reverse=True)
        entries = [
            {
                "name": m.name,
                "model": m.name,
                "modified_at": go_time(_epoch_ns(m.modified_at), local=True),
                "size": m.size,
                "digest": m.digest,
                "details": m.details,
            }
            for m in models
        ]
        return await _gin_json(request, {"models": entries})

    async def _ps(self, request: web.Request) -> web.StreamResponse:
        running = sorted(
            (
                (self.models[name], state)
                for name, state in self.loaded.items()
                if name in self.models
            ),
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
                "expires_at": go_time(state.expires_at_ns, local=True),
                "size_vram": m.size_vram,
                "context_length": state.context_length,
            }
            for m, state in running
        ]
        return await _gin_json(request, {"models": entries})

    async def _show(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        model = self._require(name, "model '{name}' not found")
        verbose = body.get("verbose") is True
        # Without verbose, Ollama keeps no GGUF array elements: non-empty arrays print null.
        info = {
            k: (None if isinstance(v, list) and v and not verbose else v)
            for k, v in sorted(model.model_info.items())
        }
        reply: dict[str, Any] = {}
        if model.license:
            reply["license"] = model.license
        reply["modelfile"] = (
            '# Modelfile generated by "ollama show"\n'
            f"# To build a new Modelfile based on this, replace FROM with:\n# FROM {model.name}\n\n"
            f"FROM /root/.ollama/models/blobs/sha256-{model.digest}\n"
            f'TEMPLATE """{model.template}"""\n'
        )
        if model.parameters:
            reply["parameters"] = model.parameters
        reply["template"] = model.template
        reply["details"] = model.details
        reply["model_info"] = info
        reply["capabilities"] = model.capabilities
        reply["modified_at"] = go_time(_epoch_ns(model.modified_at), local=True)
        return await _gin_json(request, reply)

    # -- native inference ---------------------------------------------------------------------

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._native(request, chat=True)

    async def _native(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        name = str(body.get("model") or "")
        model = self._require(name, "model '{name}' not found")
        if "completion" not in model.capabilities:
            raise _Refused(400, f'"{name}" does not support {"chat" if chat else "generate"}')
        think = body.get("think")
        if think not in (None, False) and "thinking" not in model.capabilities:
            raise _Refused(400, f'"{name}" does not support thinking')
        if (
            not chat
            and body.get("raw")
            and any(body.get(k) for k in ("context", "template", "system"))
        ):
            raise _Refused(400, "raw mode does not support template, system, or context")
        run = self._run(model, body, start_ns, think=think is not False, chat=chat)
        render = _chat_object if chat else _generate_object
        if not body.get("messages" if chat else "prompt"):
            return await self._load_reply(request, run, lambda c: render(name, c))
        events = self._produce(run, context=not chat and not body.get("raw"))
        if body.get("stream") is not False:
            return await _write_ndjson(request, events, lambda c: render(name, c))
        result = await _fold(events)
        if isinstance(result, _Die):
            return _die(request, web.StreamResponse())
        if isinstance(result, _Error):
            return await _native_error(request, result.status, result.message)
        return await _gin_json(request, render(name, result))

    async def _load_reply(
        self, request: web.Request, run: _Run, render: Callable[[_Chunk], dict[str, Any]]
    ) -> web.StreamResponse:
        """An empty prompt or message list loads the model; with keep_alive 0 unloads it (§2.6)."""
        if run.keep_alive == 0:
            self.loaded.pop(run.model.name, None)
            reason = "unload"
        else:
            await asyncio.sleep(self.script.load_delay)
            self._mark_loaded(run)
            reason = "load"
        chunk = _Chunk(created_at=go_time(time.time_ns()), done=True, done_reason=reason)
        return await _gin_json(request, render(chunk))

    # -- embeddings --------------------------------------------------------------------------

    async def _embed_phases(self, run: _Run) -> int:
        """Load, queue and compute delays for an embedding; returns when the load ended."""
        script = self.script
        await asyncio.sleep(script.load_delay)
        loaded_ns = time.monotonic_ns()
        if script.status_error is not None:
            raise _Refused(*script.status_error)
        self._mark_loaded(run)
        await asyncio.sleep(script.queue_delay + script.prefill_delay)
        return loaded_ns

    async def _embed(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        name = str(body.get("model") or "")
        model = self._require(name, 'model "{name}" not found, try pulling it first')
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs] if inputs else []
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise _Refused(400, "invalid input type")
        run = self._run(model, body, start_ns, think=False, chat=False)
        loaded_ns = await self._embed_phases(run)
        if not inputs:
            return await _gin_json(request, {"model": name, "embeddings": []})
        dimensions = body.get("dimensions")
        vectors = [_embedding(model, text) for text in inputs]
        if isinstance(dimensions, int) and dimensions > 0:
            vectors = [_normalized(v[:dimensions]) for v in vectors]
        reply = {
            "model": name,
            "embeddings": vectors,
            "total_duration": time.monotonic_ns() - start_ns,
            "load_duration": loaded_ns - start_ns,
            "prompt_eval_count": sum(_token_estimate(t) for t in inputs),
        }
        return await _gin_json(request, {k: v for k, v in reply.items() if v})

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = str(body.get("model") or "")
        model = self._require(name, 'model "{name}" not found, try pulling it first')
        run = self._run(model, body, time.monotonic_ns(), think=False, chat=False)
        await self._embed_phases(run)
        prompt = body.get("prompt") or ""
        # The legacy route widens each float32 to float64, so the long digits show (§5).
        vector = [float(v) for v in _embedding(model, prompt)] if prompt else []
        return await _gin_json(request, {"embedding": vector})

    # -- model management --------------------------------------------------------------------

    async def _progress_reply(
        self,
        request: web.Request,
        body: dict[str, Any],
        events: AsyncIterator[dict[str, Any] | _Error],
    ) -> web.StreamResponse:
        if body.get("stream") is not False:
            return await _write_ndjson(request, events, lambda obj: obj)
        last: dict[str, Any] | _Error = {}
        async for event in events:
            last = event
            if isinstance(event, _Error):
                return await _native_error(request, event.status, event.message)
        return await _gin_json(request, last)

    async def _pull(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        if not name or not isinstance(name, str):
            raise _Refused(400, "model is required")
        return await self._progress_reply(request, body, self._pull_progress(name))

    async def _pull_progress(self, name: str) -> AsyncIterator[dict[str, Any] | _Error]:
        model = self.find(name) or _new_model(canonical_name(name))
        yield {"status": "pulling manifest"}
        for digest, size in _layers(model):
            for completed in (0, size // 2, size):
                update = {
                    "status": f"pulling {digest[:12]}",
                    "digest": f"sha256:{digest}",
                    "total": size,
                }
                yield {**update, "completed": completed} if completed else update
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            yield {"status": status}
        self.models[model.name] = model

    async def _push(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        if not name or not isinstance(name, str):
            raise _Refused(400, "model is required")
        return await self._progress_reply(request, body, self._push_progress(name))

    async def _push_progress(self, name: str) -> AsyncIterator[dict[str, Any] | _Error]:
        yield {"status": "retrieving manifest"}
        model = self.find(name)
        if model is None:
            yield {"status": "couldn't retrieve manifest"}
            path = "/root/.ollama/models/manifests/registry.ollama.ai/library/" + canonical_name(
                name
            ).replace(":", "/")
            yield _Error(f"open {path}: no such file or directory")
            return
        for digest, size in _layers(model):
            yield {
                "status": f"pushing {digest[:12]}",
                "digest": f"sha256:{digest}",
                "total": size,
                "completed": size,
            }
        for status in ("pushing manifest", "success"):
            yield {"status": status}

    async def _create(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        if not name or not isinstance(name, str):
            raise _Refused(400, "model is required")
        source = body.get("from")
        if not source and not body.get("files"):
            raise _Refused(400, "neither 'from' or 'files' was specified")
        base = self.find(source) if isinstance(source, str) and source else None
        if source and base is None:
            raise _Refused(404, f"model '{source}' not found")
        return await self._progress_reply(request, body, self._create_progress(name, body, base))

    async def _create_progress(
        self, name: str, body: dict[str, Any], base: FakeModel | None
    ) -> AsyncIterator[dict[str, Any] | _Error]:
        model = (
            replace(base, name=canonical_name(name)) if base else _new_model(canonical_name(name))
        )
        if body.get("files"):
            yield {"status": "parsing GGUF"}
        quantize = body.get("quantize")
        if isinstance(quantize, str) and quantize:
            total = model.size * 3
            for completed in (12302, total - 224):
                yield {
                    "status": f"quantizing F16 model to {quantize}",
                    "digest": "0",
                    "total": total,
                    "completed": completed,
                }
            yield {"status": "verifying conversion"}
        yield {"status": f"using existing layer sha256:{model.digest}"}
        for key in ("template", "system", "parameters", "license"):
            if body.get(key):
                digest = hashlib.sha256(go_json(body[key])).hexdigest()
                yield {"status": f"creating new layer sha256:{digest}"}
        yield {"status": "writing manifest"}
        yield {"status": "success"}
        self.models[model.name] = model

    async def _copy(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        source, destination = body.get("source"), body.get("destination")
        if not isinstance(source, str) or not isinstance(destination, str) or not destination:
            raise _Refused(400, "source and destination are required")
        model = self.find(source)
        if model is None:
            raise _Refused(404, f'model "{source}" not found')
        copy = replace(model, name=canonical_name(destination), modified_at=datetime.now(UTC))
        self.models[copy.name] = copy
        return web.Response(status=200)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        model = self._require(name, "model '{name}' not found")
        del self.models[model.name]
        self.loaded.pop(model.name, None)
        return web.Response(status=200)

    # -- blobs -------------------------------------------------------------------------------

    @staticmethod
    def _digest(request: web.Request) -> str:
        digest = request.match_info["digest"]
        if not _DIGEST.match(digest):
            raise _Refused(400, "invalid digest format")
        return digest

    def _blob_key(self, digest: str) -> str:
        return "sha256:" + digest[7:]

    async def _head_blob(self, request: web.Request) -> web.StreamResponse:
        digest = self._digest(request)
        if self._blob_key(digest) not in self.blobs:
            raise _Refused(404, f'blob "{digest}" not found')
        return web.Response(status=200)

    async def _post_blob(self, request: web.Request) -> web.StreamResponse:
        digest = self._digest(request)
        if self._blob_key(digest) in self.blobs:
            return await self._early_answer(request)
        data = await self._read(request)
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != self._blob_key(digest):
            raise _Refused(400, f'digest mismatch, expected "{digest}", got "{actual}"')
        self.blobs[actual] = data
        return web.Response(status=201)

    async def _early_answer(self, request: web.Request) -> web.StreamResponse:
        """200 without reading the upload (§5); Go's server drains at most 256 KiB, else closes."""
        drained = bytearray()
        while len(drained) <= _EARLY_READ_LIMIT and not request.content.at_eof():
            piece = await request.content.read(_EARLY_READ_LIMIT + 1 - len(drained))
            if not piece:
                break
            drained += piece
        request[_RECEIVED].body = bytes(drained)
        response = web.Response(status=200)
        if not request.content.at_eof():
            response.headers["Connection"] = "close"
            response.force_close()
        return response

    # -- OpenAI compatibility ----------------------------------------------------------------

    def _compat_run(
        self, body: dict[str, Any], start_ns: int, *, think: bool, chat: bool
    ) -> tuple[str, _Run]:
        name = str(body.get("model") or "")
        model = self._require(name, "model '{name}' not found")
        return name, self._run(model, body, start_ns, think=think, chat=chat)

    async def _openai_chat(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        think = body.get("reasoning_effort") != "none"
        name, run = self._compat_run(body, start_ns, think=think, chat=True)
        events = self._produce(run, context=False)
        if body.get("stream") is True:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _openai_chat_stream(request, events, name, include_usage)
        result = await self._fold_or_refuse(request, events)
        return (
            result
            if isinstance(result, web.StreamResponse)
            else await _encoder_json(request, _openai_completion(result, name))
        )

    async def _openai_completions(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        if not isinstance(body.get("prompt"), str):
            raise _Refused(400, "invalid type for 'prompt' field: expected a string")
        name, run = self._compat_run(body, start_ns, think=True, chat=False)
        events = self._produce(run, context=False)
        if body.get("stream") is True:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _openai_text_stream(request, events, name, include_usage)
        result = await self._fold_or_refuse(request, events)
        return (
            result
            if isinstance(result, web.StreamResponse)
            else await _encoder_json(request, _openai_text_completion(result, name))
        )

    async def _openai_responses(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        effort = (body.get("reasoning") or {}).get("effort")
        name, run = self._compat_run(body, start_ns, think=effort != "none", chat=True)
        converter = _ResponsesConverter(name, body)
        events = self._produce(run, context=False)
        if body.get("stream") is True:
            return await _write_events(
                request, events, converter.process, _SSE_HEADERS, _openai_error
            )
        result = await self._fold_or_refuse(request, events)
        if isinstance(result, web.StreamResponse):
            return result
        converter.process(result)
        reply = converter.response_object(
            "completed", converter.final_output(), converter.usage(result)
        )
        return await _encoder_json(request, _sorted_map(reply))

    async def _fold_or_refuse(
        self, request: web.Request, events: AsyncIterator[_Event]
    ) -> _Chunk | web.StreamResponse:
        result = await _fold(events)
        if isinstance(result, _Die):
            return _die(request, web.StreamResponse())
        if isinstance(result, _Error):
            raise _Refused(result.status, result.message)
        return result

    async def _openai_embeddings(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        name = str(body.get("model") or "")
        model = self._require(name, 'model "{name}" not found, try pulling it first')
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if (
            not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(i, str) for i in inputs)
        ):
            raise _Refused(400, "invalid input")
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise _Refused(400, f"invalid encoding format: {encoding}")
        await self._embed_phases(self._run(model, body, start_ns, think=False, chat=False))
        data = []
        for index, text in enumerate(inputs):
            vector = _embedding(model, text)
            packed: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append(
                {
                    "object": "embedding",
                    "embedding": packed if encoding == "base64" else vector,
                    "index": index,
                }
            )
        tokens = sum(_token_estimate(t) for t in inputs)
        reply = {
            "object": "list",
            "data": data,
            "model": name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return await _encoder_json(request, reply)

    def _model_entry(self, model: FakeModel) -> dict[str, Any]:
        namespace = model.name.split("/")[-2] if "/" in model.name else "library"
        return {
            "id": model.name,
            "object": "model",
            "created": int(model.modified_at.timestamp()),
            "owned_by": namespace,
        }

    async def _openai_models(self, request: web.Request) -> web.StreamResponse:
        models = sorted(self.models.values(), key=lambda m: m.modified_at, reverse=True)
        data = [self._model_entry(m) for m in models] or None
        return await _encoder_json(request, {"object": "list", "data": data})

    async def _openai_model(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["model"]
        model = self._require(name, 'model "{name}" not found')
        return await _encoder_json(request, self._model_entry(model))

    # -- Anthropic compatibility -------------------------------------------------------------

    async def _anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        start_ns = time.monotonic_ns()
        body = await self._body(request)
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens <= 0:
            raise _Refused(400, "max_tokens is required and must be greater than 0")
        if not body.get("messages"):
            raise _Refused(400, "messages is required")
        name, run = self._compat_run(body, start_ns, think=True, chat=True)
        converter = _AnthropicConverter(name, body)
        events = self._produce(run, context=False)
        if body.get("stream") is True:
            return await _write_events(
                request, events, converter.process, _ANTHROPIC_SSE_HEADERS, _anthropic_error
            )
        result = await self._fold_or_refuse(request, events)
        if isinstance(result, web.StreamResponse):
            return result
        return await _gin_json(request, converter.message(result))


def _refusals(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], error: ErrorReply
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Render a `_Refused` raised by a handler in its route family's error shape."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except _Refused as refused:
            return await error(request, refused.status, refused.message)

    return guarded


async def _drop_server_header(request: web.Request, response: web.StreamResponse) -> None:
    # Ollama (Go net/http) sends no Server header; aiohttp would add one.
    response.headers.pop("Server", None)


def _layers(model: FakeModel) -> list[tuple[str, int]]:
    """The model blob and a small template layer, as pull and push report them."""
    template = hashlib.sha256(model.template.encode()).hexdigest()
    return [(model.digest, model.size), (template, len(model.template))]


def _new_model(name: str) -> FakeModel:
    digest = hashlib.sha256(name.encode()).hexdigest()
    return FakeModel(
        name=name,
        digest=digest,
        size=1_000_000_000,
        size_vram=1_000_000_000,
        details=model_details("llama", "1B", "Q4_K_M"),
        model_info={
            "general.architecture": "llama",
            "llama.context_length": 8192,
            "llama.embedding_length": 2048,
        },
        modified_at=datetime.now(UTC),
    )


@pytest_asyncio.fixture
async def fake_ollama(aiohttp_server: AiohttpServer) -> FakeOllama:
    """A FakeOllama on a random loopback port; `url` is its base URL without a trailing slash."""
    fake = FakeOllama()
    server = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("")).rstrip("/")
    return fake

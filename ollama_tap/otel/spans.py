"""An exchange as span attributes and events: plain values, no SDK (docs/opentelemetry.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from yarl import URL

from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.measures import request_num_ctx, timings
from ollama_tap.names import recordable
from ollama_tap.ollama import NATIVE_GENERATION
from ollama_tap.otel import semconv as sc
from ollama_tap.otel.config import Semconv

Attributes = dict[str, Any]
ContextLength = Callable[[str | None], int | None]
"""The loaded model's runtime context (num_ctx) per the poller, if loaded."""

_FIGURES: Final = {
    key: sc.TAP + name
    for key, name in (
        ("ttft", "client.time_to_first_token"),
        ("ttfc", "client.time_to_first_content"),
        ("server_ttft", "server.time_to_first_token"),
        ("client_overhead", "client_overhead"),
        ("queue_wait", "queue_wait"),
        ("load", "load_duration"),
        ("prefill", "prefill_duration"),
        ("decode", "decode_duration"),
    )
}
"""The proxy's figures (measures.timings, seconds) and their `ollama_tap.*` names, made once
(as the names below: the span mapping runs at every exchange's end)."""
_EXCHANGE_ID: Final = sc.TAP + "exchange_id"
_STREAMED: Final = sc.TAP + "streamed"
_OUTCOME: Final = sc.TAP + "outcome"
_RETRIED: Final = sc.TAP + "retried"
_CLIENT: Final = sc.TAP + "client"
_BOX: Final = sc.TAP + "box"
_ROUTE: Final = sc.TAP + "route"
_TRUNCATION: Final = sc.TAP + "truncation"
_DECODE_RATE: Final = sc.TAP + "decode_rate"
_UTILIZATION: Final = sc.TAP + "context_utilization"

_PARAMETERS: Final = {
    "temperature": (sc.TEMPERATURE, float),
    "top_p": (sc.TOP_P, float),
    "top_k": (sc.TOP_K, int),
    "seed": (sc.SEED, int),
    # Native `options.num_predict`, OpenAI's and Anthropic's `max_tokens`, OpenAI's newer name.
    "num_predict": (sc.MAX_TOKENS, int),
    "max_tokens": (sc.MAX_TOKENS, int),
    "max_completion_tokens": (sc.MAX_TOKENS, int),
}
"""Request keys of sampling parameters, and the attribute each becomes."""


def wall_ns(ex: Exchange, at: float) -> int:
    """A monotonic time of the exchange as Unix nanoseconds (the clock spans are in)."""
    return int((ex.started_wall + (at - ex.started)) * 1e9)


def error_type(ex: Exchange) -> str | None:
    """`error.type` of a failed exchange: the status code of an upstream error (as the HTTP
    conventions do), else the outcome; None when it went well."""
    outcome = ex.outcome
    if outcome is None or outcome is Outcome.OK:
        return None
    if outcome is Outcome.UPSTREAM_ERROR and ex.status is not None:
        return str(ex.status)
    return str(outcome)


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


def request_parameters(options: dict[str, Any] | None, top: dict[str, Any] | None) -> Attributes:
    """The sampling parameters the request set: from native `options`, else from the
    compatibility routes' top-level keys."""
    out: Attributes = {}
    for source in (top, options):
        if not source:
            continue
        for key, (name, kind) in _PARAMETERS.items():  # in order: the last max-tokens key wins
            if key in source and (value := _number(source[key], kind)) is not None:
                out[name] = value
    return out


Spelling = Callable[[str | None], str | None]
"""A `model` as the records name it (`ModelLabels.spelling`; `names.recordable` without
the label slots)."""


def common(
    ex: Exchange, operation: str, upstream: URL, semconv: Semconv, spelling: Spelling = recordable
) -> Attributes:
    """What the SERVER span and its CLIENT child both carry. The model is named as the
    records name it, in every privacy mode: a name Ollama would accept, canonical, else
    `other`, so a prompt pasted into `model` never reaches a collector, and a span's model
    is never longer than a name can be."""
    attrs: Attributes = {sc.OPERATION: operation, sc.PROVIDER: sc.PROVIDER_OLLAMA}
    if semconv is Semconv.DEFAULT:
        attrs[sc.SYSTEM] = sc.PROVIDER_OLLAMA
    model = spelling(ex.model)
    if model:
        attrs[sc.REQUEST_MODEL] = model
    attrs[sc.SERVER_ADDRESS] = upstream.host or ""
    if upstream.port is not None:
        attrs[sc.SERVER_PORT] = upstream.port
    attrs[sc.HTTP_METHOD] = ex.method
    if ex.status is not None:
        attrs[sc.HTTP_STATUS] = ex.status
    if (error := error_type(ex)) is not None:
        attrs[sc.ERROR_TYPE] = error
    return attrs


_CLIENT_KEYS: Final = (
    sc.OPERATION,
    sc.REQUEST_MODEL,
    sc.SERVER_ADDRESS,
    sc.SERVER_PORT,
    sc.HTTP_STATUS,
    sc.ERROR_TYPE,
)
"""What the CLIENT child repeats of `common`: what names the upstream call and its result.
Each attribute costs its encoding on the export thread, and the provider and method are the
parent's to say."""


def client_attributes(common: Attributes) -> Attributes:
    return {key: common[key] for key in _CLIENT_KEYS if key in common}


def server_attributes(
    ex: Exchange,
    top: dict[str, Any] | None,
    context_length: ContextLength | None,
    *,
    full: bool = True,
    spelling: Spelling = recordable,
) -> Attributes:
    """The SERVER span's own attributes on top of `common`: the response, usage and the
    proxy's figures. `top` is the request body's object when it was read. The client's
    address only in the `full` privacy mode, as the records keep it; the response's model
    as `spelling` names it."""
    attrs: Attributes = {
        sc.HTTP_ROUTE: ex.endpoint,
        sc.URL_PATH: ex.path,
        **request_parameters(ex.request.options, top),
    }
    if full:
        attrs[sc.CLIENT_ADDRESS] = ex.client
    model = (ex.final or {}).get("model")
    if isinstance(model, str) and model:
        attrs[sc.RESPONSE_MODEL] = spelling(model) or ""
    if ex.done_reason is not None:
        attrs[sc.FINISH_REASONS] = (ex.done_reason,)
    if (usage := ex.usage) is not None:
        if usage.prompt_eval_count is not None:
            attrs[sc.INPUT_TOKENS] = usage.prompt_eval_count
        attrs[sc.OUTPUT_TOKENS] = usage.eval_count
        if usage.prompt_eval_cached_count is not None:
            attrs[sc.CACHED_TOKENS] = usage.prompt_eval_cached_count
    attrs.update(tap_attributes(ex, context_length))
    return attrs


def tap_attributes(ex: Exchange, context_length: ContextLength | None) -> Attributes:
    """The proxy's own figures, `ollama_tap.*` (seconds, tokens per second, a ratio)."""
    attrs: Attributes = {_EXCHANGE_ID: ex.id, _STREAMED: ex.streamed}
    if ex.outcome is not None:
        attrs[_OUTCOME] = str(ex.outcome)  # a StrEnum: its value, not via `.value`
    if ex.retried is not None:
        attrs[_RETRIED] = str(ex.retried)
    if ex.client_name:
        attrs[_CLIENT] = ex.client_name
    if ex.route is not None:  # several boxes: which served it, and why the router chose it
        attrs[_BOX], attrs[_ROUTE] = ex.box, ex.route.reason
    verdict = ex.truncation
    if verdict is not None:
        attrs[_TRUNCATION] = str(verdict.kind)
    for key, value in timings(ex).items():
        if value is not None and key in _FIGURES:
            attrs[_FIGURES[key]] = value
    usage = ex.usage
    if usage is None or not usage.has_timings or ex.endpoint not in NATIVE_GENERATION:
        return attrs
    if (rate := usage.decode_rate) is not None:
        attrs[_DECODE_RATE] = rate
    size = usage.context_size
    num_ctx = request_num_ctx(ex.request.options)
    if num_ctx is None and context_length is not None:
        num_ctx = context_length(ex.model)
    if size > 0 and num_ctx:
        attrs[_UTILIZATION] = size / num_ctx
    return attrs


def events(ex: Exchange) -> list[tuple[str, int]]:
    """(name, Unix ns) of the first-token and first-content events, when they happened."""
    out = []
    if ex.first_output is not None:
        out.append((sc.FIRST_TOKEN_EVENT, wall_ns(ex, ex.first_output)))
    if ex.first_content is not None:
        out.append((sc.FIRST_CONTENT_EVENT, wall_ns(ex, ex.first_content)))
    return out

"""Every ollama_tap_* family: name, type, labels, help and buckets, as the README lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Family:
    """One row of the README's metric reference."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()
    """Upper bounds of a histogram's buckets (+Inf implied)."""


def _counter(name: str, labels: tuple[str, ...], help: str) -> Family:
    return Family(name, "counter", labels, help)


def _gauge(name: str, labels: tuple[str, ...], help: str) -> Family:
    return Family(name, "gauge", labels, help)


def _histogram(name: str, labels: tuple[str, ...], help: str, buckets: tuple[float, ...]) -> Family:
    return Family(name, "histogram", labels, help, buckets)


# --- Buckets

LATENCY_BUCKETS: Final = (
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75),
    *(1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1200, 1800),
)
"""Time to first token/content, queue wait and prefill: 5 ms to 30 min."""
DURATION_BUCKETS: Final = (*LATENCY_BUCKETS, 2700, 3600, 5400, 7200)
"""Request duration, load and decode: 5 ms to 2 h."""
INTER_TOKEN_BUCKETS: Final = (
    *(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03),
    *(0.04, 0.05, 0.065, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10),
)
RATE_BUCKETS: Final = (
    *(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 23, 26, 30, 35, 40, 46, 53, 61),
    *(70, 80, 92, 106, 122, 140, 160, 185, 212, 245, 280, 320, 370, 425, 490, 560, 750),
    *(1000, 1500, 2000, 3000, 5000),
)
"""Tokens (or events) per second: steps of about 15 % from 20 to 560, where a 30 % drop must
move the median; whole numbers below, coarse steps up to 5,000."""
CONTEXT_TOKEN_BUCKETS: Final = (
    *(m * 10**e for e in range(6) for m in (1, 2, 5)),
    1_000_000,
    1_048_576,
)
UTILIZATION_BUCKETS: Final = (0.25, 0.5, 0.75, 0.9, 0.95, 1, 1.5, 2, 5, 10)
CLIENT_TTFT_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Coarse on purpose: with the client label alone, at most 10 series per client."""

E, M, S, C = "endpoint", "model", "stream", "client"
L = "location"
"""`cloud` for exchanges Ollama proxied to a remote model (ollama_tap/cloud.py), else `local`."""

# --- The proxy itself, and the metrics observer's per-exchange families

# fmt: off
BUILD_INFO: Final = _gauge(
    "ollama_tap_build_info", ("version", "python_version"),
    "Build of ollama-tap (=1).",
)
REQUESTS: Final = _counter(
    "ollama_tap_requests_total", (E, M, C, "status", L),
    "Exchanges, by the status the client got.",
)
REQUEST_ERRORS: Final = _counter(
    "ollama_tap_request_errors_total", (E, M, C, "kind"),
    "Exchanges by outcome other than ok.",
)
IN_FLIGHT: Final = _gauge(
    "ollama_tap_requests_in_flight", (E, M, C),
    "Exchanges from request to end.",
)
RESPONSES: Final = _counter(
    "ollama_tap_responses_total", (E, M, "done_reason"),
    "Replies carrying a done_reason.",
)
DURATION: Final = _histogram(
    "ollama_tap_request_duration_seconds", (E, M, S),
    "Request head to last byte.", DURATION_BUCKETS,
)
TTFT: Final = _histogram(
    "ollama_tap_time_to_first_token_seconds", (E, M),
    "Request head to first output.", LATENCY_BUCKETS,
)
TTFC: Final = _histogram(
    "ollama_tap_time_to_first_content_seconds", (E, M),
    "Request head to first non-thinking output.", LATENCY_BUCKETS,
)
INTER_TOKEN: Final = _histogram(
    "ollama_tap_inter_token_latency_seconds", (E, M),
    "Gaps between output chunks as relayed.", INTER_TOKEN_BUCKETS,
)
OUTPUT_RATE: Final = _histogram(
    "ollama_tap_observed_output_rate", (E, M),
    "Output events per second as relayed (streams).", RATE_BUCKETS,
)
LOAD: Final = _histogram(
    "ollama_tap_load_duration_seconds", (E, M, S),
    "Ollama's load_duration.", DURATION_BUCKETS,
)
QUEUE_WAIT: Final = _histogram(
    "ollama_tap_queue_wait_seconds", (E, M, S),
    "total - load - prompt_eval - eval, clamped at 0.", LATENCY_BUCKETS,
)
PROMPT_EVAL: Final = _histogram(
    "ollama_tap_prompt_eval_duration_seconds", (E, M, S),
    "Ollama's prompt_eval_duration (prefill).", LATENCY_BUCKETS,
)
EVAL: Final = _histogram(
    "ollama_tap_eval_duration_seconds", (E, M, S),
    "Ollama's eval_duration (decode).", DURATION_BUCKETS,
)
DECODE_RATE: Final = _histogram(
    "ollama_tap_decode_tokens_per_second", (E, M),
    "eval_count / eval_duration.", RATE_BUCKETS,
)
PREFILL_RATE: Final = _histogram(
    "ollama_tap_prefill_tokens_per_second", (E, M),
    "Uncached prompt tokens / prompt_eval_duration.", RATE_BUCKETS,
)
DECODE_TOKENS: Final = _counter(
    "ollama_tap_decode_tokens_total", (M, "ctx"),
    "eval_count (rate pair).",
)
DECODE_SECONDS: Final = _counter(
    "ollama_tap_decode_seconds_total", (M, "ctx"),
    "eval_duration (rate pair).",
)
PREFILL_TOKENS: Final = _counter(
    "ollama_tap_prefill_tokens_total", (M,),
    "Uncached prompt tokens (rate pair).",
)
PREFILL_SECONDS: Final = _counter(
    "ollama_tap_prefill_seconds_total", (M,),
    "prompt_eval_duration (rate pair).",
)
PROMPT_TOKENS: Final = _counter(
    "ollama_tap_prompt_tokens_total", (E, M, C, L),
    "Prompt tokens, every source.",
)
CACHED_TOKENS: Final = _counter(
    "ollama_tap_prompt_cached_tokens_total", (E, M, C, L),
    "Prompt tokens served from the cache.",
)
GENERATION_TOKENS: Final = _counter(
    "ollama_tap_generation_tokens_total", (E, M, C, L),
    "Generated tokens, every source.",
)
CONTEXT_TOKENS: Final = _histogram(
    "ollama_tap_context_tokens", (E, M),
    "prompt_eval_count + eval_count.", CONTEXT_TOKEN_BUCKETS,
)
UTILIZATION: Final = _histogram(
    "ollama_tap_context_utilization_ratio", (E, M),
    "Context tokens / runtime num_ctx.", UTILIZATION_BUCKETS,
)
COLD_STARTS: Final = _counter(
    "ollama_tap_cold_starts_total", (M,),
    "Replies whose load took > 1 s.",
)
TRUNCATIONS: Final = _counter(
    "ollama_tap_truncations_total", (E, M, "kind"),
    "Exchanges whose prompt or output the context cut, or whose overflow Ollama refused.",
)

# --- Who is waiting and who keeps the box busy (ollama_tap/inflight/), computed at scrape time

WAITING: Final = _gauge(
    "ollama_tap_requests_waiting", (M,),
    "Exchanges in flight with no output yet (queue, load and prefill).",
)
OLDEST_WAIT: Final = _gauge(
    "ollama_tap_oldest_wait_seconds", (M,),
    "Age of the oldest waiting exchange (0 when none).",
)
CLIENT_TTFT: Final = _histogram(
    "ollama_tap_client_time_to_first_token_seconds", (C,),
    "Request head to first output per client (streamed inference), coarse buckets.",
    CLIENT_TTFT_BUCKETS,
)
CLIENT_BUSY: Final = _counter(
    "ollama_tap_client_busy_seconds_total", (C, M),
    "Seconds with at least one exchange of the client in flight on the model.",
)

# --- The upstream poller's

UPSTREAM_UP: Final = _gauge(
    "ollama_tap_upstream_up", (),
    "1 when Ollama answered the last poll.",
)
UPSTREAM_INFO: Final = _gauge(
    "ollama_tap_upstream_info", ("version",),
    "Ollama's version (=1).",
)
POLL_ERRORS: Final = _counter(
    "ollama_tap_upstream_poll_errors_total", (),
    "Failed reads of /api/version, /api/tags, /api/ps, /api/show.",
)
RETRIES: Final = _counter(
    "ollama_tap_upstream_retries_total", ("reason",),
    "Requests sent again, once, on a fresh connection: the reused one ended before any reply byte.",
)
MODEL_LOADED: Final = _gauge(
    "ollama_tap_model_loaded", (M,),
    "1 while /api/ps lists the model.",
)
MODEL_VRAM: Final = _gauge(
    "ollama_tap_model_vram_bytes", (M,),
    "size_vram per /api/ps.",
)
MODEL_SIZE: Final = _gauge(
    "ollama_tap_model_size_bytes", (M,),
    "size per /api/ps.",
)
MODEL_CONTEXT_LENGTH: Final = _gauge(
    "ollama_tap_model_context_length", (M,),
    "Runtime context (num_ctx) per /api/ps.",
)
MODEL_UNLOADS: Final = _counter(
    "ollama_tap_model_unloads_total", (M,),
    "Models leaving /api/ps.",
)
MODEL_INFO: Final = _gauge(
    "ollama_tap_model_info", (M, "family", "parameter_size", "quantization"),
    "Model details per /api/show (=1).",
)

ROUTED: Final = _counter(
    "ollama_tap_routed_total", ("upstream", "tier"),
    "Requests the router sent to a box (several --upstream NAME=URL only), by why (docs/boxes.md).",
)

# --- The load tracker's (ollama_tap/loads/)

MODEL_LOADS: Final = _counter(
    "ollama_tap_model_loads_total", (M, "cause"),
    "Load events (a reply's load_duration > 1 s, or a model new in /api/ps), by inferred cause.",
)
MODEL_EVICTIONS: Final = _counter(
    "ollama_tap_model_evictions_total", (M, "by"),
    "Models that left /api/ps unexpired while another model (`by`) loaded.",
)
CONTEXT_REDUCED: Final = _counter(
    "ollama_tap_context_reduced_total", (M,),
    "Loads whose automatic context (num_ctx unset) came out smaller than the model's last one.",
)  # fmt: skip
RELOAD_PREDICTED: Final = _counter(
    "ollama_tap_reload_predicted_total", (M, "field"),
    "Requests whose runner options differ from the resident runner's, by field, before forwarding.",
)
RELOAD_GUARD_REWRITES: Final = _counter(
    "ollama_tap_reload_guard_rewrites_total", (M,),
    "Requests sent with the resident runner's options instead of a reload (--reload-guard).",
)  # fmt: skip

# --- The recorder's, and the hooks'

BODY_TIMEOUTS: Final = _counter(
    "ollama_tap_client_body_timeouts_total", (),
    "Client connections cut because their request body brought no byte for 75 s.",
)
CONNECTIONS_REFUSED: Final = _counter(
    "ollama_tap_connections_refused_total", ("reason",),
    "Client connections not taken: fd_cap (every connection busy at the cap), accept_failed.",
)
RECORDS_DROPPED: Final = _counter(
    "ollama_tap_records_dropped_total", (),
    "Records dropped because the recorder's queue was full (traffic was not slowed).",
)
WRITE_ERRORS: Final = _counter(
    "ollama_tap_recorder_write_errors_total", (),
    "Records the writer failed to store.",
)
QUEUE_DEPTH: Final = _gauge(
    "ollama_tap_recorder_queue_depth", (),
    "Records waiting for the writer thread.",
)
DB_SIZE: Final = _gauge(
    "ollama_tap_db_size_bytes", (),
    "Size of the recordings database on disk (main file and write-ahead log).",
)
OTEL_DROPPED: Final = _counter(
    "ollama_tap_otel_dropped_total", ("signal", "reason"),
    "Spans and metric points the OpenTelemetry export lost: queue_full, export_failed, too_large.",
)
OBSERVER_ERRORS: Final = _counter(
    "ollama_tap_observer_errors_total", ("observer", "hook"),
    "Exceptions raised by an observer's hook (the hook was skipped, traffic unaffected).",
)
# fmt: on

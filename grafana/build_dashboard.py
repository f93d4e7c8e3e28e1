"""Builds the ollama-tap Grafana dashboard; run it to rewrite dashboards/ollama-tap.json.

The committed JSON is this script's output (a test checks so): edit here, then run
`.venv/bin/python grafana/build_dashboard.py`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

OUT = Path(__file__).resolve().parent / "dashboards" / "ollama-tap.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
NATIVE: Final = 'endpoint=~"/api/generate|/api/chat"'
"""The routes with Ollama's phase timings."""
TOK_S = "suffix: tok/s"
LOCAL = 'location="local"'
"""Requests that ran on this Ollama, not proxied to ollama.com (ollama_tap/cloud.py)."""
NEWER_OLLAMA = (
    " Needs an Ollama that reports prompt_eval_cached_count (releases with PR #17943);"
    " older ones leave it empty."
)

DECODE_BASELINE: Final = "ollama_tap:decode_tokens_per_second:ratio1d_offset1d"
"""The recording rule DecodeSlowdown compares the last 10 minutes with."""
BASELINE_LEGEND: Final = "day before, alert baseline"
"""Also a regular expression matching itself (the dashed-line override): no special characters."""
INSPECTOR: Final = "${inspector}"
INSPECTOR_DEFAULT: Final = "http://127.0.0.1:11435/_tap/"
"""The inspector's URL as the browser reaches it, a dashboard variable: Prometheus's
`instance` is the address it scrapes, often a name only the stack resolves."""
INSPECTOR_BY_MODEL: Final = {
    "title": "${__field.labels.model} in the inspector",
    "url": INSPECTOR + "#/?model=${__field.labels.model}",
    "targetBlank": True,
}

# -- PromQL ---------------------------------------------------------------------------------


def sel(*, model: bool = True, endpoint: bool = True, extra: str = "") -> str:
    """The label selector every query starts from: always the job and instance variables."""
    parts = ['job=~"$job"', 'instance=~"$instance"']
    if model:
        parts.append('model=~"$model"')
    if endpoint:
        parts.append('endpoint=~"$endpoint"')
    if extra:
        parts.append(extra)
    return "{" + ", ".join(parts) + "}"


def rate(metric: str, by: str, s: str) -> str:
    return f"sum by ({by}) (rate({metric}{s}[{RATE}]))"


def increase(metric: str, by: str, s: str) -> str:
    return f"sum by ({by}) (increase({metric}{s}[{RATE}]))"


BAR_STEP: Final = "1m"
"""The least step of a panel that draws events per interval as bars (4 scrapes at 15 s)."""


def per_bar(metric: str, by: str, s: str) -> str:
    """Events per bar: the counter's difference from one step back, so each event is drawn
    once. increase() over $__rate_interval (longer than the step) drew one event in several
    bars; over the step itself it missed the change between two windows' samples. A reset
    loses only its own step's count (clamped at 0). A series with no value a step back was
    born in this step, at 0 (the proxy's counters start at 0): its whole value counts."""
    step = f"clamp_min({metric}{s} - {metric}{s} offset $__interval, 0)"
    return f"sum by ({by}) ({step} or {metric}{s})"


def quantile(q: float, hist: str, by: str, s: str) -> str:
    return f"histogram_quantile({q}, {rate(hist + '_bucket', 'le, ' + by, s)})"


def mean(hist: str, s: str) -> str:
    return f"{rate(hist + '_sum', 'model', s)} / {rate(hist + '_count', 'model', s)}"


def rate_pair(tokens: str, seconds: str, by: str, s: str) -> str:
    """Tokens per second of all replies together: the rate of one counter over the other."""
    return f"{rate(tokens, by, s)} / {rate(seconds, by, s)}"


def share_above(le: str, hist: str, s: str) -> str:
    """Share of observations above a bucket bound (le may be a regex: 1 prints as "1.0")."""
    bucket = s[:-1] + f', le=~"{le}"}}'
    return f"1 - {rate(hist + '_bucket', 'model', bucket)} / {rate(hist + '_count', 'model', s)}"


# -- panels ---------------------------------------------------------------------------------


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    title: str
    description: str
    unit: str
    targets: list[Target]
    kind: str = "timeseries"
    width: int = 8
    height: int = 8
    options: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    transformations: list[dict[str, Any]] = field(default_factory=list)
    interval: str | None = None
    """The panel's least query step (Grafana's "Min interval"), where a query needs one."""


def quantiles(hist: str, s: str, by: str = "model") -> list[Target]:
    return [
        Target(quantile(q, hist, by, s), f"p{round(q * 100)} {{{{{by}}}}}")
        for q in (0.5, 0.95, 0.99)
    ]


def phase(title: str, hist: str, what: str) -> Panel:
    s = sel()
    return Panel(
        title,
        f"Median and 95th percentile of {what} per model, from Ollama's own timings "
        "(native routes only).",
        "s",
        [
            Target(quantile(q, hist, "model", s), f"p{round(q * 100)} {{{{model}}}}")
            for q in (0.5, 0.95)
        ],
        width=6,
    )


def up_defaults() -> dict[str, Any]:
    """Field defaults of an up/down stat: UP in green, DOWN in red."""
    return {
        "mappings": up_mapping(),
        "color": {"mode": "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}],
        },
    }


def up_mapping() -> list[dict[str, Any]]:
    return [
        {
            "type": "value",
            "options": {
                "0": {"text": "down", "color": "red", "index": 0},
                "1": {"text": "up", "color": "green", "index": 1},
            },
        }
    ]


def red_above(value: float) -> dict[str, Any]:
    return {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": value}],
    }


STAT = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}


def overview() -> list[Panel]:
    s = sel()
    poller = sel(model=False, endpoint=False)
    return [
        Panel(
            "Request rate",
            "Requests per second through the proxy, by route, counted when each exchange ends.",
            "reqps",
            [Target(rate("ollama_tap_requests_total", "endpoint", s), "{{endpoint}}")],
        ),
        Panel(
            "Errors by kind",
            "Exchanges per second that did not end ok, by outcome (upstream_error is any "
            "status >= 400; client_disconnected is the client going away).",
            "reqps",
            [Target(rate("ollama_tap_request_errors_total", "kind", s), "{{kind}}")],
        ),
        Panel(
            "Requests by status",
            "Requests per second by HTTP status as the client saw it (503 means Ollama's "
            "queue was full: server busy).",
            "reqps",
            [Target(rate("ollama_tap_requests_total", "status", s), "{{status}}")],
        ),
        Panel(
            "In flight",
            "Requests currently between arrival and their last byte, by route.",
            "short",
            [Target(f"sum by (endpoint) (ollama_tap_requests_in_flight{s})", "{{endpoint}}")],
            width=12,
        ),
        Panel(
            "Ollama up",
            "Whether the proxy's poller reached Ollama at its last poll.",
            "none",
            [Target(f"min(ollama_tap_upstream_up{poller})")],
            kind="stat",
            width=6,
            options=STAT,
            defaults=up_defaults(),
        ),
        Panel(
            "Ollama version",
            "The Ollama version the poller read from /api/version.",
            "none",
            [
                Target(
                    f"max by (version) (ollama_tap_upstream_info{poller})",
                    "{{version}}",
                )
            ],
            kind="stat",
            width=6,
            options={**STAT, "textMode": "name"},
        ),
    ]


def latency() -> list[Panel]:
    s = sel()
    return [
        Panel(
            "Time to first token",
            "p50/p95/p99 of the wait until the first output chunk (thinking included) reached "
            "the client, streamed replies only.",
            "s",
            quantiles("ollama_tap_time_to_first_token_seconds", s),
            width=12,
        ),
        Panel(
            "Time to first content",
            "p50/p95/p99 of the wait until the first non-thinking output reached the client: "
            "what a user of a reasoning model waits for.",
            "s",
            quantiles("ollama_tap_time_to_first_content_seconds", s),
            width=12,
        ),
        Panel(
            "Request duration",
            "p50/p95/p99 of the time from the request head to the last byte written, "
            "inference routes.",
            "s",
            quantiles("ollama_tap_request_duration_seconds", s),
            width=12,
        ),
        Panel(
            "Inter-token latency",
            "p50/p95/p99 of the gaps between successive output chunks as relayed to the client.",
            "s",
            quantiles("ollama_tap_inter_token_latency_seconds", s),
            width=12,
        ),
    ]


def phases() -> list[Panel]:
    streamed = sel(extra='stream="true"')
    return [
        phase(
            "Load",
            "ollama_tap_load_duration_seconds",
            "load_duration (body read, scheduler wait, model swap and load)",
        ),
        phase(
            "Queue wait",
            "ollama_tap_queue_wait_seconds",
            "the wait for a parallel slot plus templating (total minus the other phases)",
        ),
        phase(
            "Prefill",
            "ollama_tap_prompt_eval_duration_seconds",
            "prompt evaluation (prefill, including the first generated token)",
        ),
        phase("Decode", "ollama_tap_eval_duration_seconds", "decoding (eval_duration)"),
        Panel(
            "TTFT breakdown",
            "Mean load, queue wait and prefill of streamed native replies stacked against the "
            "mean client TTFT; the gap is network, HTTP and proxy overhead.",
            "s",
            [
                Target(mean("ollama_tap_load_duration_seconds", streamed), "load {{model}}"),
                Target(mean("ollama_tap_queue_wait_seconds", streamed), "queue {{model}}"),
                Target(
                    mean("ollama_tap_prompt_eval_duration_seconds", streamed), "prefill {{model}}"
                ),
                Target(
                    # The phases exist only for native generate/chat: so must the line they
                    # are stacked against (a /v1 reply has TTFT but no phases).
                    mean("ollama_tap_time_to_first_token_seconds", sel(extra=NATIVE)),
                    "client TTFT {{model}}",
                ),
            ],
            width=24,
            defaults={
                "custom": {
                    "stacking": {"mode": "normal", "group": "A"},
                    "drawStyle": "bars",
                    "fillOpacity": 60,
                }
            },
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": "client TTFT.*"},
                    "properties": [
                        {"id": "custom.stacking", "value": {"mode": "none", "group": "B"}},
                        {"id": "custom.drawStyle", "value": "line"},
                    ],
                }
            ],
        ),
    ]


def throughput() -> list[Panel]:
    s = sel()
    pair = sel(endpoint=False)
    return [
        Panel(
            "Decode rate",
            "Generated tokens per second of decoding per model: all eval_count over all "
            "eval_duration, as ollama run --verbose computes it (thinking tokens included).",
            TOK_S,
            [
                Target(
                    rate_pair(
                        "ollama_tap_decode_tokens_total",
                        "ollama_tap_decode_seconds_total",
                        "model",
                        pair,
                    ),
                    "{{model}}",
                )
            ],
        ),
        Panel(
            "Decode rate by context size",
            "The decode rate per model and context-size bucket (ctx): longer contexts decode "
            "slower, so the slowdown alert compares each bucket with its own baseline. Dashed: "
            "that baseline, the bucket's rate over the day before the last 24 hours; "
            "DecodeSlowdown fires when the last 10 minutes stay under 70 % of it. Click a "
            "series for its model's records in the inspector.",
            TOK_S,
            [
                Target(
                    rate_pair(
                        "ollama_tap_decode_tokens_total",
                        "ollama_tap_decode_seconds_total",
                        "model, ctx",
                        pair,
                    ),
                    "{{model}} {{ctx}}",
                ),
                Target(f"{DECODE_BASELINE}{pair}", "{{model}} {{ctx}} " + BASELINE_LEGEND),
            ],
            defaults={"links": [INSPECTOR_BY_MODEL]},
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": f".* {BASELINE_LEGEND}"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}
                    ],
                }
            ],
        ),
        Panel(
            "Decode rate, median request",
            "Median of the per-request decode rate (replies with at least 2 tokens and 1 ms "
            "of decoding), per model.",
            TOK_S,
            [Target(quantile(0.5, "ollama_tap_decode_tokens_per_second", "model", s), "{{model}}")],
        ),
        Panel(
            "Prefill rate",
            "Uncached prompt tokens evaluated per second per model (rate pair and per-request "
            "median)." + NEWER_OLLAMA,
            TOK_S,
            [
                Target(
                    rate_pair(
                        "ollama_tap_prefill_tokens_total",
                        "ollama_tap_prefill_seconds_total",
                        "model",
                        pair,
                    ),
                    "{{model}}",
                ),
                Target(
                    quantile(0.5, "ollama_tap_prefill_tokens_per_second", "model", s),
                    "median {{model}}",
                ),
            ],
        ),
        Panel(
            "Observed output rate",
            "Median output events per second as the client received them, per model: the only "
            "rate /v1 (OpenAI and Anthropic) traffic has.",
            "suffix: events/s",
            [Target(quantile(0.5, "ollama_tap_observed_output_rate", "model", s), "{{model}}")],
        ),
        Panel(
            "Tokens in and out",
            "Prompt tokens (and the cached part of them) and generated tokens per second, from "
            "every route's own counts.",
            TOK_S,
            [
                Target(rate("ollama_tap_prompt_tokens_total", "model", s), "in {{model}}"),
                Target(
                    rate("ollama_tap_prompt_cached_tokens_total", "model", s),
                    "in, cached {{model}}",
                ),
                Target(rate("ollama_tap_generation_tokens_total", "model", s), "out {{model}}"),
            ],
        ),
    ]


def clients() -> list[Panel]:
    """Who uses the box: the `client` label (ollama_tap/attribution.py) and who is waiting."""
    s = sel()
    by_client = sel(model=False, endpoint=False)
    busy = "ollama_tap_client_busy_seconds_total"
    return [
        Panel(
            "Requests by client",
            "Requests per second by client: the X-Ollama-Tap-Client header, else a --client "
            "rule, else the User-Agent's product (unknown without one; other past the cap).",
            "reqps",
            [Target(rate("ollama_tap_requests_total", "client", s), "{{client}}")],
        ),
        Panel(
            "Tokens by client",
            "Prompt and generated tokens per second by client, from every route's own counts.",
            TOK_S,
            [
                Target(rate("ollama_tap_prompt_tokens_total", "client", s), "in {{client}}"),
                Target(rate("ollama_tap_generation_tokens_total", "client", s), "out {{client}}"),
            ],
        ),
        Panel(
            "Busy share by client",
            "Each client's share of the time the model(s) had at least one exchange in flight: "
            "its busy seconds over all clients' (overlaps count for each).",
            "percentunit",
            [
                Target(
                    f"{rate(busy, 'client', sel(endpoint=False))} / scalar("
                    f"sum(rate({busy}{sel(endpoint=False)}[{RATE}])))",
                    "{{client}}",
                )
            ],
        ),
        Panel(
            "TTFT p95 by client",
            "95th percentile of the time to first token of streamed inference per client, from "
            "ollama_tap_client_time_to_first_token_seconds: a histogram with the client label "
            "alone and 9 coarse buckets (p95 is read between them), because the client label on "
            "the full TTFT histogram (per endpoint and model, 30 buckets) would be too wide.",
            "s",
            [
                Target(
                    quantile(
                        0.95, "ollama_tap_client_time_to_first_token_seconds", "client", by_client
                    ),
                    "p95 {{client}}",
                )
            ],
        ),
        Panel(
            "Waiting",
            "Exchanges in flight with no output yet per model (queue, load and prefill: Ollama "
            "sends a stream's head with its first chunk, so the proxy cannot tell them apart), "
            "and the age of the oldest one.",
            "short",
            [
                Target(
                    f"sum by (model) (ollama_tap_requests_waiting{sel(endpoint=False)})",
                    "waiting {{model}}",
                ),
                Target(
                    f"max by (model) (ollama_tap_oldest_wait_seconds{sel(endpoint=False)})",
                    "oldest wait (s) {{model}}",
                ),
            ],
            width=16,
        ),
    ]


def context() -> list[Panel]:
    s = sel()
    return [
        Panel(
            "Context utilization",
            "p50/p95 of prompt plus output tokens over the runtime num_ctx per model; above "
            "100 % Ollama shifted the context and silently dropped input.",
            "percentunit",
            [
                Target(
                    quantile(q, "ollama_tap_context_utilization_ratio", "model", s),
                    f"p{round(q * 100)} {{{{model}}}}",
                )
                for q in (0.5, 0.95)
            ],
        ),
        Panel(
            "Context size",
            "p50/p95 of prompt plus output tokens per native generate/chat reply, per model.",
            "short",
            [
                Target(
                    quantile(q, "ollama_tap_context_tokens", "model", s),
                    f"p{round(q * 100)} {{{{model}}}}",
                )
                for q in (0.5, 0.95)
            ],
        ),
        Panel(
            "Near or over the limit",
            "Share of replies whose context filled more than 90 % (near) or more than 100 % "
            "(over: input was truncated) of num_ctx, per model.",
            "percentunit",
            [
                Target(
                    share_above("0.9", "ollama_tap_context_utilization_ratio", s), "near {{model}}"
                ),
                Target(
                    share_above("1|1\\\\.0", "ollama_tap_context_utilization_ratio", s),
                    "over {{model}}",
                ),
            ],
            defaults={"min": 0, "max": 1},
        ),
        Panel(
            "Truncations",
            "Share of a model's local requests Ollama truncated, refused for not fitting, or "
            "ran past the context, by kind (docs/diagnoses.md says how each is told).",
            "percentunit",
            [
                Target(
                    f"{rate('ollama_tap_truncations_total', 'model, kind', s)} / on (model) "
                    "group_left "
                    f"{rate('ollama_tap_requests_total', 'model', sel(extra=LOCAL))}",
                    "{{kind}} {{model}}",
                )
            ],
            defaults={"min": 0},
        ),
        Panel(
            "Stops by reason",
            "Replies per second by done_reason; length means the output limit (num_predict) "
            "was reached, not that the input was cut.",
            "reqps",
            [
                Target(
                    rate("ollama_tap_responses_total", "model, done_reason", s),
                    "{{done_reason}} {{model}}",
                )
            ],
            width=16,
        ),
    ]


def models() -> list[Panel]:
    m = sel(endpoint=False)
    return [
        Panel(
            "Loaded models",
            "Models Ollama holds in memory (1) per /api/ps.",
            "none",
            [Target(f"max by (model) (ollama_tap_model_loaded{m})", "{{model}}")],
            defaults={"custom": {"drawStyle": "line", "lineInterpolation": "stepAfter"}},
        ),
        Panel(
            "VRAM vs size",
            "Bytes of each loaded model in GPU memory against its total size; less VRAM than "
            "size means part of the model runs on the CPU.",
            "bytes",
            [
                Target(f"max by (model) (ollama_tap_model_vram_bytes{m})", "vram {{model}}"),
                Target(f"max by (model) (ollama_tap_model_size_bytes{m})", "size {{model}}"),
            ],
        ),
        Panel(
            "Partial offload",
            "Share of each loaded model held in system RAM instead of VRAM (1 - vram/size); "
            "red above 0 marks a partial CPU offload.",
            "percentunit",
            [
                Target(
                    f"1 - max by (model) (ollama_tap_model_vram_bytes{m}) "
                    f"/ max by (model) (ollama_tap_model_size_bytes{m})",
                    "{{model}}",
                )
            ],
            kind="stat",
            options=STAT,
            defaults={"color": {"mode": "thresholds"}, "thresholds": red_above(0.001)},
        ),
        Panel(
            "Loads and cold starts",
            "Model loads and unloads seen in /api/ps, and replies whose load took over 1 s, "
            "per interval.",
            "short",
            [
                Target(per_bar("ollama_tap_model_loads_total", "model", m), "loads {{model}}"),
                Target(per_bar("ollama_tap_model_unloads_total", "model", m), "unloads {{model}}"),
                Target(
                    per_bar("ollama_tap_cold_starts_total", "model", m), "cold starts {{model}}"
                ),
            ],
            width=12,
            defaults={"custom": {"drawStyle": "bars", "fillOpacity": 80}},
            interval=BAR_STEP,
        ),
        Panel(
            "Model info",
            "Family, parameter size and quantization of each model, from /api/show.",
            "none",
            [
                Target(
                    "max by (model, family, parameter_size, quantization) "
                    f"(ollama_tap_model_info{m})",
                    instant=True,
                    table=True,
                )
            ],
            kind="table",
            width=12,
            transformations=[
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True}},
                }
            ],
        ),
    ]


def loads() -> list[Panel]:
    """Why models (re)load, who makes room for whom, and the time it costs (ollama_tap/loads/)."""
    m = sel(endpoint=False)
    bars = {"custom": {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}}}
    return [
        Panel(
            "Loads by cause",
            "Load events per interval by inferred cause: options_changed and evicted are "
            "thrashing (alert ModelThrashing); `ollama-tap loads` names the app behind each. "
            "'context reduced': loads whose automatic context came out smaller than the "
            "model's last, as it did not fit memory (alert ContextReduced).",
            "short",
            [
                Target(per_bar("ollama_tap_model_loads_total", "cause", m), "{{cause}}"),
                Target(
                    per_bar("ollama_tap_context_reduced_total", "model", m),
                    "context reduced {{model}}",
                ),
            ],
            defaults=bars,
            interval=BAR_STEP,
        ),
        Panel(
            "Evictions",
            "Models that left /api/ps unexpired while another model loaded, per interval.",
            "short",
            [
                Target(
                    per_bar("ollama_tap_model_evictions_total", "model, by", m),
                    "{{model}} by {{by}}",
                )
            ],
            defaults=bars,
            interval=BAR_STEP,
        ),
        Panel(
            "Time lost to loads",
            "Seconds requests waited for a model load per interval (Ollama's load_duration "
            "summed over replies), the requests predicted to reload a resident runner, and "
            "those --reload-guard sent with the resident runner's options instead (spared).",
            "s",
            [
                Target(increase("ollama_tap_load_duration_seconds_sum", "model", m), "{{model}}"),
                Target(
                    increase("ollama_tap_reload_predicted_total", "model, field", m),
                    "predicted reloads {{model}} ({{field}})",
                ),
                Target(
                    increase("ollama_tap_reload_guard_rewrites_total", "model", m),
                    "spared reloads {{model}} (reload guard)",
                ),
            ],
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": "(predicted|spared).*"},
                    "properties": [{"id": "unit", "value": "short"}],
                }
            ],
        ),
    ]


def boxes() -> list[Panel]:
    """Several Ollama boxes behind one tap (--upstream NAME=URL, docs/boxes.md): empty with one."""
    b = sel(model=False, endpoint=False)
    # The request counters of exchanges no box served (the /api/tags, /api/ps, /api/version
    # unions, refusals) carry upstream="": not a box, so not a line here.
    r = sel(extra='upstream!=""')
    failed = sel(extra='upstream!="", kind!="client_disconnected"')
    bars = {"custom": {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}}}
    return [
        Panel(
            "Request rate by box",
            "Requests per second each box served (by the $model and $endpoint filters), "
            "counted when each exchange ends.",
            "reqps",
            [Target(rate("ollama_tap_requests_total", "upstream", r), "{{upstream}}")],
        ),
        Panel(
            "Error rate by box",
            "Share of each box's requests that did not end ok (client disconnects left out): "
            "a box failing alone stands out here, where the overview averages it away.",
            "percentunit",
            [
                Target(
                    f"{rate('ollama_tap_request_errors_total', 'upstream', failed)}"
                    f" / {rate('ollama_tap_requests_total', 'upstream', r)}",
                    "{{upstream}}",
                )
            ],
        ),
        Panel(
            "Decode rate by box",
            "Generated tokens per second of decode time on each box, all replies together "
            "(eval_count over eval_duration): the box's GPU, whatever the mix of requests.",
            TOK_S,
            [
                Target(
                    rate_pair(
                        "ollama_tap_decode_tokens_total",
                        "ollama_tap_decode_seconds_total",
                        "upstream",
                        sel(endpoint=False, extra='upstream!=""'),
                    ),
                    "{{upstream}}",
                )
            ],
        ),
        Panel(
            "Boxes up",
            "Each box's last poll: 1 when it answered /api/version; a box at 0 is skipped by "
            "the router (several --upstream NAME=URL only).",
            "short",
            [Target(f"max by (upstream) (ollama_tap_upstream_up{b})", "{{upstream}}")],
        ),
        Panel(
            "Requests by box and why",
            "Requests the router sent to each box per second, by tier: resident (no reload), "
            "loadable, listed, unlisted, named by the header, failover after a box failed.",
            "reqps",
            [Target(rate("ollama_tap_routed_total", "upstream, tier", b), "{{upstream}} {{tier}}")],
        ),
        Panel(
            "Loads by box",
            "Load events per interval on each box by inferred cause: a box that keeps loading "
            "is one the router could not keep its models resident on.",
            "short",
            [
                Target(
                    per_bar("ollama_tap_model_loads_total", "upstream, cause", b),
                    "{{upstream}} {{cause}}",
                )
            ],
            defaults=bars,
            interval=BAR_STEP,
        ),
    ]


def health() -> list[Panel]:
    p = sel(model=False, endpoint=False)
    return [
        Panel(
            "Proxy scrape up",
            "Whether Prometheus could scrape the proxy's /metrics at its last attempt.",
            "none",
            [Target(f"min(up{p})")],
            kind="stat",
            width=4,
            options=STAT,
            defaults=up_defaults(),
        ),
        Panel(
            "Records dropped",
            "Records the recorder dropped per interval because its queue was full (recordings "
            "lost; client traffic unaffected).",
            "short",
            [Target(per_bar("ollama_tap_records_dropped_total", "job", p), "dropped")],
            width=5,
            interval=BAR_STEP,
            defaults={"color": {"mode": "thresholds"}, "thresholds": red_above(1)},
        ),
        Panel(
            "Recorder queue",
            "Records waiting for the database writer thread.",
            "short",
            [Target(f"sum(ollama_tap_recorder_queue_depth{p})", "queue")],
            width=5,
        ),
        Panel(
            "Database size",
            "Size of the recorder's SQLite database on disk.",
            "bytes",
            [Target(f"sum(ollama_tap_db_size_bytes{p})", "database")],
            width=5,
        ),
        Panel(
            "Internal errors",
            "Per-second recorder write errors, upstream poll errors, observer errors (a "
            "failing observer is skipped; the client stream goes on) and requests sent again "
            "because a reused upstream connection ended before any reply byte (harmless; "
            "steady retries mean something between the proxy and Ollama closes connections).",
            "ops",
            [
                Target(
                    f"sum(rate(ollama_tap_recorder_write_errors_total{p}[{RATE}]))",
                    "recorder writes",
                ),
                Target(
                    f"sum(rate(ollama_tap_upstream_poll_errors_total{p}[{RATE}]))", "upstream polls"
                ),
                Target(
                    rate("ollama_tap_observer_errors_total", "observer, hook", p),
                    "{{observer}} {{hook}}",
                ),
                Target(
                    rate("ollama_tap_upstream_retries_total", "reason", p), "sent again: {{reason}}"
                ),
            ],
            width=5,
        ),
        Panel(
            "OpenTelemetry export lost",
            "Spans and metric points the OTLP export lost per interval, by signal and reason: "
            "queue_full (the collector is slower than the traffic, or hangs: the export queue "
            "is at its bound), export_failed (refused, down, or no answer within the timeout), "
            "too_large (a single span over the collector's request limit). Traffic is "
            "unaffected.",
            "short",
            [
                Target(
                    per_bar("ollama_tap_otel_dropped_total", "signal, reason", p),
                    "{{signal}}: {{reason}}",
                )
            ],
            width=12,
            interval=BAR_STEP,
            defaults={"color": {"mode": "thresholds"}, "thresholds": red_above(1)},
        ),
        Panel(
            "Connections cut or refused",
            "Client connections per interval cut because their request body brought no byte "
            "for 75 s (a client that stopped mid-upload, or a slow-body flood), and those "
            "not taken: fd_cap (every connection busy at the cap, half the open-file limit), "
            "accept_failed (the loop ran out of descriptors).",
            "short",
            [
                Target(per_bar("ollama_tap_client_body_timeouts_total", "job", p), "stalled body"),
                Target(
                    per_bar("ollama_tap_connections_refused_total", "reason", p),
                    "refused: {{reason}}",
                ),
            ],
            width=12,
            interval=BAR_STEP,
            defaults={"color": {"mode": "thresholds"}, "thresholds": red_above(1)},
        ),
        Panel(
            "Proxy CPU",
            "CPU time the proxy process uses per second of wall time.",
            "percentunit",
            [Target(f"rate(process_cpu_seconds_total{p}[{RATE}])", "{{instance}}")],
            width=12,
        ),
        Panel(
            "Proxy memory",
            "Resident memory of the proxy process.",
            "bytes",
            [Target(f"process_resident_memory_bytes{p}", "{{instance}}")],
            width=12,
        ),
    ]


ROWS = {
    "Overview": overview,
    "Latency": latency,
    "Phases": phases,
    "Throughput": throughput,
    "Clients": clients,
    "Context": context,
    "Models": models,
    "Loads": loads,
    "Boxes": boxes,
    "Proxy health": health,
}

# -- JSON -----------------------------------------------------------------------------------


def target_json(t: Target, ref: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": t.expr,
        "legendFormat": t.legend or "__auto",
        "range": not t.instant,
        "instant": t.instant,
        "refId": ref,
    }
    if t.table:
        out["format"] = "table"
    return out


def panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit, **p.defaults}, "overrides": p.overrides},
        "options": p.options
        or {
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        # A stat shows the state now: an instant query. Reduced from a range, it kept showing
        # what had ended (an unloaded model's offload, the version before an upgrade).
        "targets": [
            target_json(replace(t, instant=True) if p.kind == "stat" else t, chr(ord("A") + i))
            for i, t in enumerate(p.targets)
        ],
        "transformations": p.transformations,
    } | ({"interval": p.interval} if p.interval else {})


def layout() -> list[dict[str, Any]]:
    """Rows in order; each row's panels flow left to right, wrapping at 24 columns."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, make in ROWS.items():
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = row_height = 0
        for p in make():
            if x + p.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(panel_json(p, len(panels) + 1, x, y))
            x += p.width
            row_height = max(row_height, p.height)
        y += row_height
    return panels


def variable(name: str, label: str, query: str, all_value: str | None = ".*") -> dict[str, Any]:
    """A multi-value query variable with "All". `all_value` None makes "All" the values
    themselves, as for job and instance: ".*" there would also select the series of every
    other scrape job in the panels that read non-ollama_tap metrics (up, process_*)."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    } | ({"allValue": all_value} if all_value is not None else {})


VERSION_CHANGE = (
    "(ollama_tap_upstream_info{s} unless last_over_time(ollama_tap_upstream_info{s}[10m] "
    "offset 10m)) and on (job, instance) last_over_time(ollama_tap_upstream_info{s}[10m] "
    "offset 10m)"
).replace("{s}", sel(model=False, endpoint=False))
"""A version the tap reports now and did not 10 minutes ago, on a tap that reported another
then: a change of Ollama's version, a tap restart between them included, and not a tap's
first start. The rule of `ollama_tap:upstream_version:changed1d` (deploy/prometheus), over
10 minutes rather than a day, so that the mark sits where the change happened."""


def annotations() -> dict[str, Any]:
    """The marks drawn on every panel: Grafana's own, and each change of Ollama's version
    (where `ollama-tap upgrade-check` compares the figures)."""
    return {
        "list": [
            {
                "name": "Ollama version change",
                "datasource": DATASOURCE,
                "enable": True,
                "iconColor": "orange",
                "expr": VERSION_CHANGE,
                "step": "1m",
                "titleFormat": "Ollama {{version}}",
                "textFormat": "{{instance}} now runs Ollama {{version}}",
                "tagKeys": "instance",
                "useValueForTime": False,
            }
        ]
    }


def templating() -> dict[str, Any]:
    scoped = '{job=~"$job", instance=~"$instance"}'
    return {
        "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "refresh": 1,
                "regex": "",
            },
            variable("job", "Job", "label_values(ollama_tap_build_info, job)", None),
            variable(
                "instance",
                "Instance",
                'label_values(ollama_tap_build_info{job=~"$job"}, instance)',
                None,
            ),
            variable("model", "Model", f"label_values(ollama_tap_requests_total{scoped}, model)"),
            variable(
                "endpoint", "Endpoint", f"label_values(ollama_tap_requests_total{scoped}, endpoint)"
            ),
            {
                "name": "inspector",
                "label": "Inspector URL",
                "description": "Where a browser reaches ollama-tap's /_tap/ (serve prints it)",
                "type": "textbox",
                "query": INSPECTOR_DEFAULT,
                "current": {"text": INSPECTOR_DEFAULT, "value": INSPECTOR_DEFAULT},
                "hide": 0,
            },
        ]
    }


def build() -> dict[str, Any]:
    return {
        "__inputs": [],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        ],
        "uid": "ollama-tap",
        "title": "ollama-tap",
        "description": "What apps see through the ollama-tap proxy and what Ollama does: "
        "latency, phases, decode and prefill rates, context, models and the proxy itself.",
        "tags": ["ollama", "ollama-tap", "llm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": annotations(),
        "links": [
            {
                "title": "Inspector",
                "type": "link",
                "url": INSPECTOR,
                "tooltip": "ollama-tap's record inspector (the Inspector URL variable)",
                "targetBlank": True,
                "icon": "external link",
            }
        ],
        "templating": templating(),
        "panels": layout(),
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")

"""The truncation and overflow rules (T1–T3, T7–T9 of docs/diagnoses.md), as pure functions
of one finished Exchange and the runtime context it ran in.

Ollama never says on the wire that it cut a prompt: every rule reads the token counts,
`context` and error text of the reply against `C`, the runner's per-slot context (/api/ps
`context_length`). Each returns one `Verdict` or None; `judge` runs them in order of
certainty and keeps the first. Nothing here runs per token.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from ollama_tap.exchange import Exchange, Usage
from ollama_tap.facts import TruncationKind, Verdict
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.ollama.request import honoured_options, reads_runner_fields
from ollama_tap.ollama.version import CACHED_COUNTED, LLAMA_SERVER, Version
from ollama_tap.truncation.context import Runtime, slot_context

__all__ = ["Runtime", "Verdict", "judge"]

DEFAULT_NUM_KEEP: Final = 4
"""Ollama's `num_keep` default (api/types.go); a Modelfile may set another, unseen here."""
SHIFT_HEADROOM: Final = (0, 30, 11)
"""The first version that truncates to L(C,k) ≈ C/2 (llama_server.go, #16856)."""
LENGTH_REASONS: Final = frozenset({"length", "max_tokens", "max_output_tokens", "incomplete"})
"""done_reason (or finish/stop reason) values of an output cut at a token limit."""
OPEN_ENDED_FACTOR: Final = 10
"""Ollama bounds an unset num_predict at 10 × C (`boundedNumPredict`; `llm/server.go`
since v0.1.33)."""
EMBED_BATCH: Final = 2048
"""An embedding model's default batch: `min(2048, num_ctx)` (`llm/llama_server.go`
`embeddingBatchSize`, `WithDefaultEmbeddingNumBatch`, v0.30.0+); an input over it fails
once in llama-server and is cut to the batch (`routes.go` `truncateInputToLimit(text,
opts.NumBatch)`)."""


def shift_limit(c: int, keep: int) -> int:
    """L(C,k) = C − max(floor((C − k)/2), 1), k clamped to [0, C−1]: the prompt tokens left
    after Ollama's stage-2 truncation (`contextShiftPromptLimit`)."""
    keep = max(0, min(keep, c - 1))
    return c - max((c - keep) // 2, 1)


def truncated_lengths(c: int, num_keep: int | None, version: Version | None) -> set[int]:
    """The prompt_eval_count values a truncated prompt reports on this version (T1). The
    tokenizer's BOS (k + 1) is not known here, so both are taken."""
    if version is not None and version < LLAMA_SERVER:
        return {c}
    if version is not None and version < SHIFT_HEADROOM:
        return {c - 1}
    if num_keep is not None and num_keep < 0:
        return {c - 1}
    keep = DEFAULT_NUM_KEEP if num_keep is None else num_keep
    return {shift_limit(c, keep), shift_limit(c, keep + 1)}


_CONTEXT_SIZE: Final = re.compile(
    r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)"
)
_MLX: Final = re.compile(
    r"input length \((\d+) tokens\) exceeds the model's maximum context length \((\d+) tokens\)"
)
_FIELD: Final = re.compile(r'"(n_prompt_tokens|n_ctx)"\s*:\s*(\d+)')
REFUSALS: Final = (
    "exceed_context_size_error",
    "exceeds the available context size",
    "the prompt is longer than the context length currently available",
    "exceeds the model's maximum context length",
    "the input length exceeds the context length",
    "input after truncation exceeds maximum context length",
    "input exceeds maximum context length",
)
"""Ollama's and llama-server's refusals of an over-long input (rule T3, docs/diagnoses.md)."""


def refused(ex: Exchange, c: int | None = None) -> Verdict | None:
    """T3: an error that says the input does not fit, whatever its status: a 400 on most
    routes, a 500 on the legacy /api/embeddings (`routes.go` `EmbeddingsHandler` wraps the
    same text), and a 500 or a mid-stream line of native chat (`llama-server chat error:
    map[…]`). The text is llama-server's raw JSON nested as a string, or an object, or
    Ollama's own sentence: matched on substrings, with the counts taken from the message
    or the JSON fields when present. llama-server's `n_ctx` is its padded slot (512 for a
    num_ctx of 300): the verdict's context is C when known, as every other rule's, and the
    explanation names both."""
    text = ex.error_message
    if ex.status is None or not text:
        return None
    if not any(marker in text for marker in REFUSALS):
        return None
    prompt = said = None
    if found := (_CONTEXT_SIZE.search(text) or _MLX.search(text)):
        prompt, said = int(found[1]), int(found[2])
    fields = dict(_FIELD.findall(text))
    prompt = prompt or _int(fields.get("n_prompt_tokens"))
    said = said or _int(fields.get("n_ctx"))
    size = f" ({prompt:,} tokens)" if prompt else ""
    limit = f" ({said:,})" if said else ""
    if said and c and said != c:
        limit = f" (num_ctx {c:,}, run in a slot of {said:,})"
    return Verdict(
        TruncationKind.REFUSED, "T3", c or said, None, prompt,
        f"Ollama refused the request: the input{size} does not fit the runtime context{limit}; "
        "raise num_ctx or shorten the prompt",
    )  # fmt: skip


def _int(value: str | None) -> int | None:
    return int(value) if value else None


def _ok(ex: Exchange) -> Usage | None:
    """The usage of a successful reply that reports its prompt count."""
    u = ex.usage
    if ex.status != 200 or u is None or u.prompt_eval_count is None:
        return None
    return u


def context_gap(ex: Exchange, u: Usage, c: int | None, rt: Runtime) -> Verdict | None:
    """T2 (/api/generate, not raw): the final `context` is tokenized from the untruncated
    prompt (`routes.go` GenerateHandler, `Tokenize(prompt + sb)`), `prompt_eval_count`
    counts what was kept, so D = len(context) − (P + E) is the number dropped (≈ 0, −1
    with a BOS tokenizer, when nothing was). From v0.30.11 a cut drops ≈ C/2, so D > C/4
    (P/2 when C is unknown) is a truncation; before, the cut kept C or C − 1 and dropped
    only the overflow, so there D ≥ 2 with P at that length is one."""
    context = (ex.final or {}).get("context")
    if ex.endpoint != "/api/generate" or not isinstance(context, list):
        return None
    p = u.prompt_eval_count or 0
    if rt.version is not None and LLAMA_SERVER <= rt.version < CACHED_COUNTED:
        # v0.30.0: P leaves out the prompt's cached front, so the gap counts it too; what a
        # cut keeps is C − 1 (D ≤ 0 for a prompt that fit), and without C nothing is known.
        if c is None:
            return None
        p = c - 1
    lost = len(context) - (p + u.eval_count)
    threshold = c // 4 if c else p // 2
    old = rt.version is not None and rt.version < SHIFT_HEADROOM
    small_cut = old and c is not None and lost >= 2 and p in truncated_lengths(c, None, rt.version)
    if lost <= max(threshold, 8) and not small_cut:
        return None
    where = f", the runtime context {c:,}" if c else ""
    return Verdict(
        TruncationKind.PROMPT_TRUNCATED, "T2", c, lost, p,
        f"the first ≈{lost:,} tokens of this prompt were dropped: it was {p + lost:,} tokens"
        f"{where}; raise num_ctx or shorten the prompt",
    )  # fmt: skip


def kept_count(ex: Exchange, u: Usage, c: int, rt: Runtime, num_keep: int | None) -> Verdict | None:
    """T1: a prompt_eval_count equal to what stage-2 truncation leaves (L(C,k) ≈ C/2 since
    v0.30.11, C−1 on v0.30.0–0.30.10, C on the Go runners). Not with media (stage 2 is
    skipped then), nor on /api/generate with `context` (T2 decides there)."""
    if ex.endpoint not in INFERENCE_ENDPOINTS:
        return None
    if ex.endpoint == "/api/generate" and isinstance((ex.final or {}).get("context"), list):
        return None
    p = u.prompt_eval_count or 0
    # The body is searched only for a count that matches: it may be megabytes of history.
    if p not in truncated_lengths(c, num_keep, rt.version) or _has_media(ex.request_body):
        return None
    return Verdict(
        TruncationKind.PROMPT_TRUNCATED, "T1", c, None, p,
        f"the prompt was cut to {p:,} tokens, the length Ollama truncates to: it was longer "
        f"than the runtime context {c:,}, and its front (after the first few tokens) was "
        "dropped; raise num_ctx or shorten the prompt",
    )  # fmt: skip


_MEDIA: Final = (b'"images"', b'"image_url"', b'"input_image"', b'"image"', b'"input_audio"')


def _has_media(body: bytes | None) -> bool:
    return body is not None and any(marker in body for marker in _MEDIA)


def cut_by_context(ex: Exchange, u: Usage, c: int, slot: int) -> Verdict | None:
    """T8: a length stop with P + E ∈ [S−1, S] and E not the requested limit: the context
    ran out with shift off (shift:false, deepseek2, vision models), not num_predict.
    S is llama-server's padded slot (`process_token` stops at `n_tokens + 1 ≥ n_ctx`)."""
    if ex.done_reason not in LENGTH_REASONS or ex.endpoint not in INFERENCE_ENDPOINTS:
        return None
    p, e = u.prompt_eval_count or 0, u.eval_count
    if not slot - 1 <= p + e <= slot or e == requested_limit(ex):
        return None
    return Verdict(
        TruncationKind.OUTPUT_CUT, "T8", c, None, p,
        f"the output was cut by the context limit, not by num_predict: prompt {p:,} + output "
        f"{e:,} tokens filled the runtime context {c:,} (context shift is off); raise num_ctx",
    )  # fmt: skip


def shifted(ex: Exchange, u: Usage, c: int, slot: int) -> Verdict | None:
    """T7: P + E past the slot means llama-server shifted the context at least once while
    generating (the model lost the front of its own context); prompt_eval_count is not
    changed by a shift and eval_count counts every generated token. The slot is C padded
    to a multiple of 256 (`slot_context`): a num_ctx of 3000 runs in 3072 tokens."""
    if ex.endpoint not in INFERENCE_ENDPOINTS:
        return None
    p, e = u.prompt_eval_count or 0, u.eval_count
    if p + e <= slot:
        return None
    runaway = ""
    if (
        ex.done_reason in LENGTH_REASONS
        and e == OPEN_ENDED_FACTOR * c
        and requested_limit(ex) is None
    ):
        runaway = f" and stopped at Ollama's cap of {OPEN_ENDED_FACTOR} × the context"
    return Verdict(
        TruncationKind.CONTEXT_SHIFT, "T7", c, None, p,
        f"the reply ran past the context: prompt {p:,} + output {e:,} tokens exceed the runtime "
        f"context {c:,}, so Ollama shifted out the front of the context while generating"
        f"{runaway}; raise num_ctx or set num_predict",
    )  # fmt: skip


def embed_cut(ex: Exchange, u: Usage, c: int, rt: Runtime) -> Verdict | None:
    """T9 (single input only: a list reports one sum): the input was cut to its first C
    tokens (head kept), so prompt_eval_count lands within 2 of C (BOS and EOS re-added);
    or, from v0.30.0, to the embedding batch B = num_batch (default min(2048, C)) when it
    fit C but not the batch: llama-server refused it once and Ollama retried it cut."""
    if ex.endpoint not in {"/api/embed", "/v1/embeddings"}:
        return None
    p = u.prompt_eval_count or 0
    batch = embed_batch(ex, c, rt.version)
    limit = c if c - 2 <= p <= c else batch if batch and batch - 2 <= p <= batch else None
    if limit is None or not _single_input(ex.request_body):
        return None
    what = "the runtime context" if limit == c else "the embedding batch, num_batch"
    return Verdict(
        TruncationKind.EMBED_TRUNCATED, "T9", c, None, p,
        f"the embedding input was cut to its first {p:,} tokens ({what} {limit:,}); "
        "the rest was not embedded; raise num_ctx (and num_batch) or split the input",
    )  # fmt: skip


def embed_batch(ex: Exchange, c: int, version: Version | None) -> int | None:
    """The batch an embedding input is cut to on its retry (EMBED_BATCH), None before
    v0.30.0 (the Go runners truncated to C only)."""
    if version is not None and version < LLAMA_SERVER:
        return None
    asked = (honoured_options(ex) or {}).get("num_batch")
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
        return min(asked, c)
    return min(EMBED_BATCH, c)


def _body(body: bytes | None) -> dict[str, Any]:
    if body is None:
        return {}
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _single_input(body: bytes | None) -> bool:
    value = _body(body).get("input")
    return isinstance(value, str) or (isinstance(value, list) and len(value) == 1)


def requested_limit(ex: Exchange) -> int | None:
    """The output limit the request set (num_predict, max_tokens and kin), else None.
    Parsed only for the rare reply the rules already suspect."""
    body = _body(ex.request_body)
    options = body.get("options") if reads_runner_fields(ex.endpoint) else None
    candidates = [options.get("num_predict") if isinstance(options, dict) else None]
    candidates += [
        body.get(k) for k in ("max_tokens", "max_completion_tokens", "max_output_tokens")
    ]
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def num_keep_of(options: dict[str, Any] | None) -> int | None:
    value = (options or {}).get("num_keep")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _or(value: int | None, default: int | None) -> int | None:
    return default if value is None else value


def judge(ex: Exchange, rt: Runtime) -> Verdict | None:
    """The first rule that holds, most certain first: T3, T2, T1, T8, T7, T9."""
    if ex.endpoint not in INFERENCE_ENDPOINTS and ex.endpoint not in EMBEDDING_ENDPOINTS:
        return None
    if (verdict := refused(ex, rt.context)) is not None:
        return verdict
    if (u := _ok(ex)) is None:
        return None
    c = rt.context
    if (verdict := context_gap(ex, u, c, rt)) is not None or c is None:
        return verdict
    if rt.soft:
        return None
    slot = slot_context(c, rt.train, rt.version)
    return (
        kept_count(ex, u, c, rt, _or(num_keep_of(honoured_options(ex)), rt.num_keep))
        or cut_by_context(ex, u, c, slot)
        or shifted(ex, u, c, slot)
        or embed_cut(ex, u, c, rt)
    )

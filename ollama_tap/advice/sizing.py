"""The context a record needed, rounded to what llama.cpp allocates, and the memory of its KV
cache. Pure functions of records' columns and of /api/show and /api/ps answers.

What a record tells of the context it needed (`need_of`):

| record | needed | exact? |
|---|---|---|
| no verdict, `P` and `E` known | `P + E` (it fit) | yes |
| T2 (`tokens_lost` known) | `P + lost + E` | yes |
| T7 context shift | `P + E` (ran past the slot) | yes |
| T3 refusal with its count | the refused prompt's tokens + 1 | yes |
| T1, T3 without a count, T5 | `C + 1 (+ E)` | a lower bound: the cut prompt's length is unknown |
| T8 output cut | `P + E + 1` | a lower bound: the output wanted more |
| T9 embedding cut | `P + 1` | a lower bound |

The suggested `num_ctx` is the largest need rounded up to a multiple of 256: llama.cpp pads
every slot to one (`truncation.context.SLOT_PADDING`, `src/llama-context.cpp`
`GGML_PAD(n_ctx, 256)`), so any value in between costs the same memory as the multiple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ollama_tap.facts import TruncationKind
from ollama_tap.ollama.payloads import count_or_none, dict_or_none, str_or_empty
from ollama_tap.truncation.context import SLOT_PADDING

CUT_KINDS: Final = frozenset(
    {
        TruncationKind.PROMPT_TRUNCATED,
        TruncationKind.REFUSED,
        TruncationKind.EMBED_TRUNCATED,
        TruncationKind.HISTORY_DROPPED,
    }
)
"""Verdicts whose prompt did not fit: what the PromptsTruncated alert counts."""
F16_BYTES: Final = 2
"""Bytes per cached element at Ollama's default KV cache type, f16 (`OLLAMA_KV_CACHE_TYPE`
unset; q8_0 takes about half, q4_0 about a quarter: `ggml` block sizes 34/32 and 18/32)."""


@dataclass(frozen=True, slots=True)
class Need:
    """The context one record, or the largest of several, needed."""

    tokens: int
    exact: bool
    """False when `tokens` is only a lower bound (the real length was cut off unseen)."""

    def most(self, other: Need | None) -> Need:
        """The larger need; at equal sizes, a lower bound wins (it may be more)."""
        if other is None or self.tokens > other.tokens:
            return self
        if other.tokens > self.tokens:
            return other
        return Need(self.tokens, self.exact and other.exact)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def need_of(prompt: Any, output: Any, verdict: dict[str, Any] | None) -> Need | None:
    """What one record needed (the module's table), None when it tells nothing."""
    p, e = _int(prompt), _int(output) or 0
    if not verdict:
        return None if p is None else Need(p + e, True)
    rule, c = verdict.get("rule"), _int(verdict.get("context"))
    lost, counted = _int(verdict.get("tokens_lost")), _int(verdict.get("prompt_tokens"))
    if rule == "T2" and lost is not None and p is not None:
        return Need(p + lost + e, True)
    if rule == "T7" and p is not None:
        return Need(p + e, True)
    if rule == "T3" and counted is not None:
        return Need(counted + 1, True)
    if rule == "T8" and p is not None:
        return Need(p + e + 1, False)
    if rule == "T9" and p is not None:
        return Need(p + 1, False)
    return None if c is None else Need(c + 1 + e, False)


def padded(tokens: int) -> int:
    """`tokens` rounded up to llama.cpp's slot padding (a multiple of 256)."""
    return -(-tokens // SLOT_PADDING) * SLOT_PADDING


@dataclass(frozen=True, slots=True)
class KvShape:
    """What the KV cache of a model is made of, per /api/show `model_info`."""

    layers: int
    """`<arch>.block_count`."""
    kv_heads: int
    """Key/value heads summed over the layers: `<arch>.attention.head_count_kv` (else
    `head_count`, no grouped-query attention) times the layers, or the sum of its per-layer
    list (hybrid models list 0 for their recurrent layers, which keep no KV cache)."""
    key_length: int
    """`<arch>.attention.key_length`, else `embedding_length / head_count`."""
    value_length: int
    """`<arch>.attention.value_length`, else the key length."""
    train: int | None
    """`<arch>.context_length`: no runner gets more."""
    sliding_window: int | None
    """`<arch>.attention.sliding_window`: some layers keep only that many tokens, so the
    estimate is an upper bound."""

    def bytes_at(self, ctx: int) -> int:
        """KV cache bytes of one slot of `ctx` tokens at f16: K and V of every layer's
        heads, `Σ kv_heads × (key_length + value_length) × ctx × 2`, which is the textbook
        `2 × layers × kv_heads × head_dim × ctx × 2` when keys and values have one size."""
        return self.kv_heads * (self.key_length + self.value_length) * ctx * F16_BYTES


def _per_layer(value: Any, layers: int) -> int | None:
    """A head count over all layers: one number for every layer, or a list of one each."""
    if isinstance(value, list):
        counts = [c for v in value if (c := count_or_none(v)) is not None]
        return sum(counts) if len(counts) == len(value) else None
    count = count_or_none(value)
    return None if count is None else count * layers


def kv_shape(show: dict[str, Any]) -> KvShape | None:
    """The KV shape of an /api/show answer, None when `model_info` lacks what it needs
    (a cloud stub, an architecture without attention keys)."""
    info = dict_or_none(show.get("model_info")) or {}
    arch = str_or_empty(info.get("general.architecture"))
    layers = count_or_none(info.get(f"{arch}.block_count")) if arch else None
    if not layers:
        return None
    heads = _per_layer(info.get(f"{arch}.attention.head_count"), layers)
    kv_heads = _per_layer(info.get(f"{arch}.attention.head_count_kv"), layers)
    kv_heads = heads if kv_heads is None else kv_heads
    width = count_or_none(info.get(f"{arch}.embedding_length"))
    key = count_or_none(info.get(f"{arch}.attention.key_length"))
    if not key and width and heads:
        key = width // (heads // layers or 1)
    if not key or kv_heads is None:
        return None
    value = count_or_none(info.get(f"{arch}.attention.value_length")) or key
    return KvShape(
        layers, kv_heads, key, value,
        count_or_none(info.get(f"{arch}.context_length")),
        count_or_none(info.get(f"{arch}.attention.sliding_window")),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Loaded:
    """A model's /api/ps row, as far as sizing goes."""

    context: int | None
    size: int
    size_vram: int


def loaded_rows(ps: dict[str, Any]) -> dict[str, Loaded]:
    """/api/ps rows by the names it lists (`name`, and `model` when it differs)."""
    rows: dict[str, Loaded] = {}
    models = ps.get("models")
    for entry in models if isinstance(models, list) else []:
        if not isinstance(entry, dict):
            continue
        row = Loaded(
            count_or_none(entry.get("context_length")),
            count_or_none(entry.get("size")) or 0,
            count_or_none(entry.get("size_vram")) or 0,
        )
        for key in ("name", "model"):
            if isinstance(name := entry.get(key), str) and name:
                rows.setdefault(name, row)
    return rows

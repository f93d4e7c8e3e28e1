"""What a record tells of the context it needed, the 256 padding, and the KV cache size."""

from __future__ import annotations

from typing import Any

import pytest

from ollama_tap.advice.sizing import Need, kv_shape, loaded_rows, need_of, padded
from tests.advice.shapes import GEMMA3_270M, LLAMA3_8B


def verdict(rule: str, **fields: Any) -> dict[str, Any]:
    return {"rule": rule, "kind": "prompt_truncated", "context": 4096, **fields}


@pytest.mark.parametrize(
    ("prompt", "output", "found", "need"),
    [
        (1000, 200, None, Need(1200, True)),
        (None, None, None, None),
        (2048, 10, verdict("T2", tokens_lost=3000), Need(5058, True)),
        (4000, 500, verdict("T7"), Need(4500, True)),
        (None, None, verdict("T3", prompt_tokens=5000), Need(5001, True)),
        (None, None, verdict("T3"), Need(4097, False)),
        (2046, 12, verdict("T1"), Need(4109, False)),
        (4000, 96, verdict("T8"), Need(4097, False)),
        (4094, None, verdict("T9"), Need(4095, False)),
        (None, None, {"rule": "T3", "context": None}, None),
    ],
)
def test_each_record_tells_what_it_needed(
    prompt: int | None, output: int | None, found: dict[str, Any] | None, need: Need | None
) -> None:
    assert need_of(prompt, output, found) == need


def test_a_lower_bound_wins_a_tie_and_the_larger_need_wins_otherwise() -> None:
    assert Need(10, True).most(Need(10, False)) == Need(10, False)
    assert Need(11, True).most(Need(10, False)) == Need(11, True)
    assert Need(9, True).most(None) == Need(9, True)


@pytest.mark.parametrize(("tokens", "slot"), [(1, 256), (256, 256), (257, 512), (5058, 5120)])
def test_the_context_is_rounded_to_llama_cpp_padding(tokens: int, slot: int) -> None:
    assert padded(tokens) == slot


def test_grouped_query_attention_sizes_the_cache() -> None:
    shape = kv_shape(LLAMA3_8B)
    assert shape is not None
    # 2 (K, V) × 32 layers × 8 kv heads × 128 head dim × 8192 tokens × 2 bytes = 1 GiB.
    assert shape.bytes_at(8192) == 2 * 32 * 8 * 128 * 8192 * 2 == 1 << 30
    assert (shape.train, shape.sliding_window) == (131072, None)


def test_explicit_key_and_value_lengths_win_over_the_width() -> None:
    shape = kv_shape(GEMMA3_270M)
    assert shape is not None
    assert shape.bytes_at(4096) == 18 * 1 * (256 + 256) * 4096 * 2
    assert shape.sliding_window == 512


def test_per_layer_head_counts_are_summed() -> None:
    hybrid = {
        "model_info": {
            "general.architecture": "lfm2", "lfm2.block_count": 4,
            "lfm2.attention.head_count": 8, "lfm2.attention.head_count_kv": [0, 2, 0, 2],
            "lfm2.embedding_length": 512,
        }
    }  # fmt: skip
    shape = kv_shape(hybrid)
    assert shape is not None and shape.bytes_at(100) == 4 * (64 + 64) * 100 * 2


@pytest.mark.parametrize(
    "show",
    [{}, {"model_info": {"general.architecture": "x"}}, {"model_info": "no"},
     {"model_info": {"general.architecture": "x", "x.block_count": 2}}],
)  # fmt: skip
def test_an_answer_without_the_shape_gives_no_estimate(show: dict[str, Any]) -> None:
    assert kv_shape(show) is None


def test_ps_rows_are_found_by_name_and_model() -> None:
    rows = loaded_rows({"models": [
        {"name": "a:latest", "model": "a:latest", "size": 10, "size_vram": 4,
         "context_length": 4096},
        {"name": "b:1b", "size": "x"}, "junk",
    ]})  # fmt: skip
    assert rows["a:latest"].context == 4096 and rows["a:latest"].size == 10
    assert rows["b:1b"].size == 0 and rows["b:1b"].context is None
    assert loaded_rows({"models": None}) == {}

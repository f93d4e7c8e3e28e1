"""The advice document: the context it has, the num_ctx to set, and what it costs."""

from __future__ import annotations

from ollama_tap.advice.report import Upstream, advise, human_bytes
from ollama_tap.advice.sizing import KvShape, Loaded, Need
from ollama_tap.advice.window import Tally

GEMMA = KvShape(18, 18, 256, 256, 32768, 512)
"""Gemma 3 270M: 18 layers of one KV head of 256, a 512-token sliding window."""


def test_a_lower_bound_says_at_least_and_the_sliding_window_up_to() -> None:
    tally = Tally("gemma3:270m", "notes", requests=4, cut=1, need=Need(4097, False), context=4096)
    loaded = {"gemma3:270m": Loaded(4096, 300_000_000, 0)}
    [doc] = advise([tally], Upstream({"gemma3:270m": GEMMA}, loaded))
    assert (doc["num_ctx"], doc["needed_exact"], doc["kv_upper_bound"]) == (4352, False, True)
    assert doc["kv_bytes"] == 18 * 512 * 4352 * 2
    assert doc["estimated_size"] == 300_000_000 + 18 * 512 * (4352 - 4096) * 2
    assert doc["advice"] == (
        "set num_ctx to at least 4,352 (up to 80.2 MB of f16 KV cache, 4.7 MB more)"
    )


def test_a_need_past_the_training_context_is_said_as_such() -> None:
    tally = Tally("gemma3:270m", None, requests=1, cut=1, need=Need(40_000, True), context=32768)
    [doc] = advise([tally], Upstream({"gemma3:270m": GEMMA}, {}))
    assert doc["over_training"] and doc["kv_bytes"] == GEMMA.bytes_at(32768)
    assert doc["advice"].startswith("needs 40,000 tokens, over the model's training context 32,768")


def test_no_need_known_and_nothing_cut() -> None:
    unknown = Tally("m:latest", None, requests=2, cut=2)
    fine = Tally("m:latest", "a", requests=2, need=Need(300, True), context=4096)
    docs = advise([unknown, fine], Upstream({}, {}))
    assert docs[0]["advice"] == "prompts did not fit, by an unknown amount; raise num_ctx"
    assert docs[1]["advice"] == "every prompt fit; the largest needed 300 tokens"
    assert docs[1]["kv_bytes"] is None and docs[1]["num_ctx"] == 512


def test_sizes_read_as_ollama_prints_them() -> None:
    assert [human_bytes(n) for n in (512, 75_497_472, 1_073_741_824, -4_718_592)] == [
        "512 B", "75.5 MB", "1.1 GB", "-4.7 MB",
    ]  # fmt: skip

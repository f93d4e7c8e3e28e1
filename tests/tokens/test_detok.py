"""Detokenizing: the llama.cpp test vectors round-trip, and the token kinds' rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_tap.tokens.detok import Detokenizer, Piece
from ollama_tap.tokens.errors import DecodeError, UnsupportedTokenizer
from ollama_tap.tokens.vocab import Vocab
from tests.support.vocab_vectors import vocab_cases
from tests.tokens.conftest import SPM_TOKENS, SPM_TYPES, VOCAB_DIR

# Vocabularies with .inp/.out vectors (mpt's vectors also fit gpt-neox: same tokens).
VECTORS = ["dbrx", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm", "mpt",
           "phi-3", "refact", "starcoder", "gpt-neox:mpt"]  # fmt: skip


@pytest.mark.parametrize("spec", VECTORS)
def test_vectors_round_trip(vocab_dir: Path, spec: str) -> None:
    name, _, vectors = spec.partition(":")
    vocab = Vocab.from_gguf(vocab_dir / f"ggml-vocab-{name}.gguf")
    cases = vocab_cases(vocab_dir, vectors or name)
    assert len(cases) >= 40
    for text, ids in cases:
        assert vocab.decode(ids) == text


def test_every_vector_file_is_covered() -> None:
    if not VOCAB_DIR.is_dir():
        pytest.skip(f"the shared vocabularies are not checked out beside the repo ({VOCAB_DIR})")
    found = {p.name.removeprefix("ggml-vocab-").removesuffix(".gguf.inp")
             for p in VOCAB_DIR.glob("*.inp")}  # fmt: skip
    assert found == {s.partition(":")[0] for s in VECTORS if ":" not in s} | {"bert-bge"}


def test_wordpiece_is_unsupported(vocab_dir: Path) -> None:
    vocab = Vocab.from_gguf(vocab_dir / "ggml-vocab-bert-bge.gguf")
    _, ids = vocab_cases(vocab_dir, "bert-bge")[5]
    with pytest.raises(UnsupportedTokenizer, match=r"^unsupported tokenizer model 'bert'$"):
        vocab.decode(ids)
    with pytest.raises(UnsupportedTokenizer):
        vocab.pieces(ids)


@pytest.mark.parametrize("model", ["t5", "rwkv", "bert", "none", ""])
def test_other_models_refused(model: str) -> None:
    with pytest.raises(UnsupportedTokenizer, match=f"unsupported tokenizer model '{model}'"):
        Detokenizer(model, ["a"], [1], True)


SPM = Detokenizer("llama", SPM_TOKENS, SPM_TYPES, True)


def test_spm_control_shown_or_hidden() -> None:
    assert SPM.decode([1, 4, 5, 6, 7, 2]) == "<s> Hello, world!</s>"
    assert SPM.decode([1, 4, 5, 6, 7, 2], hide_control=True) == "Hello, world!"


def test_spm_byte_fallback_collects_utf8_across_tokens() -> None:
    assert SPM.decode([4, 8, 9, 10, 3]) == "Hello€\n"
    assert SPM.decode([11]) == "€"


def test_spm_drops_only_one_leading_space() -> None:
    tokens = ["<unk>", "▁", "▁▁x"]
    spm = Detokenizer("llama", tokens, [2, 1, 1], True)
    assert spm.decode([1, 2]) == "  x"
    assert Detokenizer("llama", tokens, [2, 1, 1], False).decode([1, 2]) == "   x"


def test_invalid_utf8_is_replaced_only_where_invalid() -> None:
    assert SPM.decode([8, 9, 4]) == "\ufffd Hello"  # a cut-off euro sign, then text


def test_unknown_is_special_and_unused_prints_nothing() -> None:
    detok = Detokenizer("gpt2", ["<unk>", "x", "<unused0>", "<extra>"], [2, 1, 5, 4], True)
    assert detok.decode([0, 1, 2, 3]) == "<unk>x<extra>"
    assert detok.decode([0, 1, 2, 3], hide_control=True) == "x<extra>"


def test_gpt2_byte_level_pieces() -> None:
    detok = Detokenizer("gpt2", ["Ġhello", "Ċ", "<|im_start|>", "Ã©"], [1, 1, 3, 1], True)
    assert detok.decode([2, 0, 1, 3]) == "<|im_start|> hello\né"
    assert detok.pieces([2, 0, 1]) == [
        Piece(2, "<|im_start|>", "control"), Piece(0, " hello", "normal"),
        Piece(1, "\n", "normal"),
    ]  # fmt: skip


def test_pieces_show_partial_utf8_as_escapes() -> None:
    assert SPM.pieces([8, 3, 0]) == [
        Piece(8, "\\xe2", "byte"), Piece(3, "\n", "byte"), Piece(0, "<unk>", "unknown")
    ]  # fmt: skip


@pytest.mark.parametrize("bad", [12, -1, 10**12])
def test_ids_out_of_range(bad: int) -> None:
    with pytest.raises(DecodeError, match=f"token id {bad} is outside this vocabulary of 12"):
        SPM.decode([1, bad])
    with pytest.raises(DecodeError):
        SPM.pieces([bad])


def test_empty_ids() -> None:
    assert SPM.decode([]) == ""
    assert SPM.pieces([]) == []


def test_missing_token_types_mean_normal() -> None:
    detok = Detokenizer("llama", ["▁a", "▁b"], [], True)
    assert detok.decode([0, 1]) == "a b"

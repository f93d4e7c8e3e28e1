"""Fixtures of the tokens tests: the shared vocabulary folder and synthetic stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tokens.synth import add_model, gguf_bytes, vocab_kv

VOCAB_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "testdata" / "vocab"
SPM_TOKENS = ["<unk>", "<s>", "</s>", "<0x0A>", "▁Hello", ",", "▁world", "!", "<0xE2>", "<0x82>",
              "<0xAC>", "▁€"]  # fmt: skip
SPM_TYPES = [2, 3, 3, 6, 1, 1, 1, 1, 6, 6, 6, 1]


@pytest.fixture
def vocab_dir() -> Path:
    if not VOCAB_DIR.is_dir():
        pytest.skip(f"the shared vocabularies are not checked out beside the repo ({VOCAB_DIR})")
    return VOCAB_DIR


@pytest.fixture
def spm_gguf() -> bytes:
    """A tiny SentencePiece vocabulary with control, unknown and byte tokens."""
    return gguf_bytes(vocab_kv("llama", SPM_TOKENS, SPM_TYPES))


@pytest.fixture
def store(tmp_path: Path, spm_gguf: bytes) -> Path:
    """A model store holding tiny:latest and someone/tiny:q4."""
    root = tmp_path / "models"
    add_model(root, "tiny:latest", spm_gguf)
    add_model(root, "someone/tiny:q4", spm_gguf + b"\0" * 64)
    return root

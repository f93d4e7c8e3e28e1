"""llama.cpp's vocabulary test vectors: each test string with the token ids it encodes to."""

from __future__ import annotations

from pathlib import Path

SEPARATOR = "\n__ggml_vocab_test__\n"


def vocab_cases(vocab_dir: Path, name: str) -> list[tuple[str, list[int]]]:
    texts = (vocab_dir / f"ggml-vocab-{name}.gguf.inp").read_text("utf-8").split(SEPARATOR)
    lines = (vocab_dir / f"ggml-vocab-{name}.gguf.out").read_text("utf-8").split("\n")
    assert texts[-1] == ""  # every string is followed by the separator
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts[:-1], lines, strict=False)]

"""Vocabulary benchmark: GGUF header reading (ours vs gguf-py), vocabulary load, decoding."""

# Run from the repository root: .venv/bin/python -m bench.vocab [VOCAB_DIR]
# Targets: a 100k-token vocabulary loads in ≤ 1 s; 128k ids decode in ≤ 50 ms.

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ollama_tap.tokens.gguf import read_metadata
from ollama_tap.tokens.vocab import Vocab

DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "testdata" / "vocab"
LARGEST = "ggml-vocab-deepseek-llm.gguf"  # 102400 tokens, 3.97 MB: the biggest gguf-py reads
DECODE_IDS = 128 * 1024


def best_of(runs: int, fn: Callable[[], object]) -> float:
    """The fastest of `runs` calls, in seconds (the least disturbed by the machine)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gguf_py(path: Path) -> str:
    try:
        import gguf  # optional: only the comparison needs it
    except ImportError:
        return "gguf-py not installed"
    seconds = best_of(3, lambda: gguf.GGUFReader(path))
    return f"{seconds * 1000:8.1f} ms"


def bench_decode(vocab: Vocab, name: str) -> None:
    rng = random.Random(5)
    ids = [rng.randrange(len(vocab.tokens)) for _ in range(DECODE_IDS)]
    seconds = best_of(5, lambda: vocab.decode(ids))
    pieces = best_of(3, lambda: vocab.pieces(ids))
    print(f"decode {DECODE_IDS} ids, {name:<28} {seconds * 1000:8.1f} ms  (target ≤ 50 ms)"
          f"   per-token view {pieces * 1000:6.1f} ms")  # fmt: skip


def main(folder: Path) -> int:
    largest = folder / LARGEST
    if not largest.is_file():
        print(
            f"no vocabularies in {folder}; pass the shared testdata/vocab folder", file=sys.stderr
        )
        return 1
    ours = best_of(3, lambda: read_metadata(largest))
    print(f"GGUF header of {LARGEST}: ours {ours * 1000:8.1f} ms, gguf-py {gguf_py(largest)}")
    for name in (LARGEST, "ggml-vocab-dbrx.gguf", "ggml-vocab-llama-spm.gguf"):
        seconds = best_of(3, partial(Vocab.from_gguf, folder / name))
        vocab = Vocab.from_gguf(folder / name)
        print(f"load {len(vocab.tokens):6} tokens, {name:<28} {seconds * 1000:8.1f} ms"
              "  (target ≤ 1000 ms)")  # fmt: skip
        bench_decode(vocab, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))

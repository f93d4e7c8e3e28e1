"""The real GGUF: `decode --gguf` reads Gemma 3's 262k vocabulary as llama.cpp does, and
`models inspect` reads the blob laid out as an Ollama store as llama.cpp loaded it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ollama_tap.cli import main
from tests.engine.conftest import Engine
from tests.engine.provision import GEMMA_SHA256
from tests.tokens.synth import add_model

TEXTS = [
    "日本語の文章と中文混合,한국어도 조금.",
    "👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👨🏽‍💻 coder, 🇫🇷 and a lone ‍ joiner",
    "\ttabs\t\tand    runs   of spaces  \n\n\n  end  ",
    "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk> and <mask> beside plain text",
    "naïve café — “quotes” … ∑∫√ Русский ελληνικά עברית العربية",
    "line\r\nbreaks\rand \x01 control \x7f bytes",
    "def f(x):\n    return {'a': [1, 2]}  # code",
]


def _decoded(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(["decode", *args]) == 0
    return orjson.loads(capsys.readouterr().out)


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
async def test_decode_matches_the_engines_detokenizer(
    text: str, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = await engine.post(
        "/tokenize", {"content": text, "parse_special": True, "with_pieces": True}
    )
    ids = [token["id"] for token in tokens["tokens"]]
    detokenized = await engine.post("/detokenize", {"tokens": ids})
    ours = _decoded(capsys, "--gguf", str(engine.gguf), "--json", "--tokens", *map(str, ids))
    assert ours["text"] == detokenized["content"]
    # Piece by piece too, where llama.cpp's piece is text (else it lists the piece's bytes).
    for theirs, mine in zip(tokens["tokens"], ours["tokens"], strict=True):
        assert mine["id"] == theirs["id"]
        if isinstance(theirs["piece"], str):
            assert mine["text"] == theirs["piece"], mine


async def test_models_inspect_reads_the_real_blob(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_model(tmp_path, "gemma3:270m", engine.gguf, template=b"{{ .Prompt }}")
    models = await engine.get("/v1/models")
    assert main(["models", "inspect", "gemma3:270m", "--store", str(tmp_path), "--json"]) == 0
    found = orjson.loads(capsys.readouterr().out)
    assert found["verified"] is True
    meta = models["data"][0]["meta"]
    gguf = found["gguf"]
    assert gguf["architecture"] == "gemma3"
    assert gguf["tokenizer_model"] == "llama"
    assert gguf["file_type"] == "Q4_K_M"
    assert (gguf["vocab_size"], gguf["context_length"], gguf["embedding_length"]) == (
        meta["n_vocab"], meta["n_ctx_train"], meta["n_embd"],
    )  # fmt: skip
    assert found["model_path"] == str(tmp_path / "blobs" / f"sha256-{GEMMA_SHA256}")

"""`decode_record`: why a record has no decoded context, case by case."""

from __future__ import annotations

from typing import Any

import pytest

from ollama_tap.tokens.context import decode_record
from ollama_tap.tokens.errors import VocabError
from ollama_tap.tokens.vocab import Vocab
from tests.tokens.conftest import SPM_TOKENS, SPM_TYPES

SPM = Vocab.from_kv(
    {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": SPM_TOKENS,
     "tokenizer.ggml.token_type": SPM_TYPES},
    "spm.gguf",
)  # fmt: skip
BERT = Vocab.from_kv(
    {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["[PAD]", "[CLS]"]}, "bert.gguf"
)


def generate(**fields: Any) -> dict[str, Any]:
    record = {"endpoint": "/api/generate", "model": "m:latest", "model_digest": "ab" * 32,
              "mode": "full", "outcome": "ok", "context": [1, 4, 6], "context_len": 3}  # fmt: skip
    return record | fields


def loader(vocab: Vocab | Exception, calls: list[tuple[str, str | None]] | None = None) -> Any:
    async def load(model: str, digest: str | None) -> Vocab:
        if calls is not None:
            calls.append((model, digest))
        if isinstance(vocab, Exception):
            raise vocab
        return vocab

    return load


async def test_decoded_with_the_recorded_digest() -> None:
    calls: list[tuple[str, str | None]] = []
    doc = await decode_record(generate(), loader(SPM, calls), tokens=True)
    assert calls == [("m:latest", "ab" * 32)]
    assert doc["text"] == "<s> Hello world"
    assert doc["tokens"][1] == {"id": 4, "text": " Hello", "kind": "normal"}
    assert (doc["ids_count"], doc["vocabulary"], doc["reason"]) == (3, "spm.gguf", None)


@pytest.mark.parametrize(
    ("record", "load", "reason", "message"),
    [
        (generate(endpoint="/v1/completions"), loader(SPM), "route",
         "/v1/completions replies carry no context"),
        (generate(context=None, mode="metadata"), loader(SPM), "privacy",
         "keeps only the number of context ids (3)"),
        (generate(context=None, context_len=None, request={"body": {"json": {"raw": True}}}),
         loader(SPM), "raw", "raw-mode /api/generate replies carry no context"),
        (generate(context=None, context_len=None, outcome="upstream_error"), loader(SPM),
         "no_context", "no context (outcome upstream_error)"),
        (generate(), None, "no_vocabulary", "no vocabulary source is configured"),
        (generate(model=None), loader(SPM), "no_vocabulary", "names no model"),
        (generate(), loader(VocabError("cannot reach Ollama")), "no_vocabulary",
         "cannot reach Ollama"),
        (generate(), loader(BERT), "unsupported_tokenizer", "unsupported tokenizer model 'bert'"),
        (generate(context=[1, 99]), loader(SPM), "wrong_vocabulary",
         "token id 99 is outside this vocabulary of 12 tokens"),
    ],
)  # fmt: skip
async def test_why_not_decoded(
    record: dict[str, Any], load: Any, reason: str, message: str
) -> None:
    doc = await decode_record(record, load)
    assert (doc["reason"], doc["text"]) == (reason, None)
    assert message in doc["unavailable"]

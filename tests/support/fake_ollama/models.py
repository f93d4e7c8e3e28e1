"""The installed models the fake serves, and what it computes from them (names, embeddings)."""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.support.fake_ollama.gojson import F32, f32


def model_details(family: str, parameter_size: str, quantization: str) -> dict[str, Any]:
    """A ModelDetails object in Go's field order."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": parameter_size,
        "quantization_level": quantization,
    }


@dataclass
class FakeModel:
    """One installed model: what /api/tags, /api/ps and /api/show report about it."""

    name: str
    digest: str
    size: int
    details: dict[str, Any]
    model_info: dict[str, Any]
    capabilities: list[str] = field(default_factory=lambda: ["completion"])
    size_vram: int = 0
    context_length: int | None = None
    """A Modelfile `PARAMETER num_ctx`: the model's automatic context instead of the
    server's default (`Engine.default_context`)."""
    modified_at: datetime = field(default_factory=lambda: datetime(2025, 9, 1, 12, 0, tzinfo=UTC))
    template: str = "{{ .Prompt }}"
    parameters: str = ""
    license: str = ""
    """Its LICENSE layers, joined by newlines as /api/show joins them."""
    system: str = ""
    blob: str = ""
    """The weights' blob digest (the manifest `digest` when empty): what a runner is keyed by."""
    tensors: list[dict[str, Any]] = field(default_factory=list)
    """/api/show's `tensors` (api.Tensor: name, type, shape), verbose or not; when empty, the
    two a GGUF of its `model_info` has at least."""

    def __post_init__(self) -> None:
        self.blob = self.blob or self.digest
        if not self.tensors:
            architecture = self.model_info.get("general.architecture", "")
            vocab = int(self.model_info.get(f"{architecture}.vocab_size", 32000))
            self.tensors = [
                {"name": "output_norm.weight", "type": "F32", "shape": [self.embedding_length]},
                {
                    "name": "token_embd.weight",
                    "type": self.details.get("quantization_level", "F16").rsplit("_", 1)[0],
                    "shape": [self.embedding_length, vocab],
                },
            ]

    @property
    def embedding_length(self) -> int:
        architecture = self.model_info.get("general.architecture", "")
        return int(self.model_info.get(f"{architecture}.embedding_length", 384))


@dataclass
class LoadedModel:
    """A model /api/ps shows: until when it stays, with which runtime context."""

    expires_at_ns: int
    """0 while a runner loads for its first request: /api/ps then shows now + session."""
    context_length: int
    session_ns: int = 0


def default_models() -> dict[str, FakeModel]:
    vocab = ["<|begin_of_text|>", "The", "Ġsky", "Ġis", "Ġblue", "."]
    models = [
        FakeModel(
            name="llama3.2:latest",
            digest="a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
            size=2019393189,
            size_vram=2019393189,
            details=model_details("llama", "3.2B", "Q4_K_M"),
            capabilities=["completion", "tools"],
            model_info={
                "general.architecture": "llama",
                "general.file_type": 15,
                "general.parameter_count": 3212749888,
                "general.quantization_version": 2,
                "llama.attention.head_count": 24,
                "llama.attention.head_count_kv": 8,
                "llama.block_count": 28,
                "llama.context_length": 131072,
                "llama.embedding_length": 3072,
                "llama.vocab_size": 128256,
                "tokenizer.ggml.bos_token_id": 128000,
                "tokenizer.ggml.eos_token_id": 128009,
                "tokenizer.ggml.merges": ["Ġ s", "Ġ b"],
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": "llama-bpe",
                "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
                "tokenizer.ggml.tokens": vocab,
            },
            template="<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>",
            parameters='stop                           "<|eot_id|>"',
            license="LLAMA 3.2 COMMUNITY LICENSE AGREEMENT",
        ),
        FakeModel(
            name="qwen3:8b",
            digest="500a1f067a9f782620b40bee6f7b0c89e17ae61f686b92c24933e4ca4b2b8b41",
            size=5225387923,
            size_vram=5225387923,
            details=model_details("qwen3", "8.2B", "Q4_K_M"),
            capabilities=["completion", "tools", "thinking"],
            model_info={
                "general.architecture": "qwen3",
                "general.parameter_count": 8190735360,
                "qwen3.context_length": 40960,
                "qwen3.embedding_length": 4096,
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.tokens": vocab,
                "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
            },
        ),
        FakeModel(
            name="all-minilm:latest",
            digest="1b226e2802dbb772b5fc32a58f103ca1804ef7501331012de126ab22f67475ef",
            size=45960996,
            size_vram=45960996,
            details=model_details("bert", "23M", "F16"),
            capabilities=["embedding"],
            context_length=256,  # as if its Modelfile set num_ctx 256
            model_info={
                "general.architecture": "bert",
                "general.parameter_count": 22565376,
                "bert.context_length": 512,
                "bert.embedding_length": 384,
                "tokenizer.ggml.model": "bert",
                "tokenizer.ggml.tokens": ["[PAD]", "[CLS]", "[SEP]"],
            },
        ),
    ]
    return {model.name: model for model in models}


def new_model(name: str) -> FakeModel:
    digest = hashlib.sha256(name.encode()).hexdigest()
    return FakeModel(
        name=name,
        digest=digest,
        size=1_000_000_000,
        size_vram=1_000_000_000,
        details=model_details("llama", "1B", "Q4_K_M"),
        model_info={
            "general.architecture": "llama",
            "llama.context_length": 8192,
            "llama.embedding_length": 2048,
        },
        modified_at=datetime.now(UTC),
    )


def layers(model: FakeModel) -> list[tuple[str, int]]:
    """The model blob and a small template layer, as pull and push report them."""
    template = hashlib.sha256(model.template.encode()).hexdigest()
    return [(model.digest, model.size), (template, len(model.template))]


def canonical_name(name: str) -> str:
    """Ollama's short form: registry host and `library/` implied, tag `latest` by default."""
    short = name.removeprefix("registry.ollama.ai/").removeprefix("library/")
    last = short.rsplit("/", 1)[-1]
    return short if ":" in last else short + ":latest"


def token_estimate(text: str) -> int:
    # A word-piece count plus the two special tokens an embedding model adds (Ollama counts
    # 8 for "Why is the sky blue?").
    return len(re.findall(r"\w+|[^\w\s]", text)) + 2


def embedding(model: FakeModel, text: str) -> list[F32]:
    """A deterministic, L2-normalised vector, as Ollama returns."""
    rng = random.Random(hashlib.sha256(f"{model.name}\0{text}".encode()).digest())
    raw = [rng.gauss(0.0, 1.0) for _ in range(model.embedding_length)]
    return normalized(raw)


def normalized(values: Sequence[float]) -> list[F32]:
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [f32(v / norm) for v in values]

"""/api/show `model_info` of real models, as far as the KV cache estimate reads it."""

from __future__ import annotations

from typing import Any

GEMMA3_270M: dict[str, Any] = {
    "model_info": {
        "general.architecture": "gemma3",
        "gemma3.block_count": 18,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.embedding_length": 640,
        "gemma3.context_length": 32768,
        "gemma3.attention.sliding_window": 512,
    }
}
"""/api/show `model_info` of Gemma 3 270M, as Ollama 0.24 answers it (the fields read)."""
LLAMA3_8B: dict[str, Any] = {
    "model_info": {
        "general.architecture": "llama",
        "llama.block_count": 32,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "llama.embedding_length": 4096,
        "llama.context_length": 131072,
    }
}

"""Model names by Ollama's rules: the canonical name, the case-folded key, refused names."""

from __future__ import annotations

import pytest

from ollama_tap.ollama.names import canonical_model, is_valid_name, model_key


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("llama3.2", "llama3.2:latest"),
        ("llama3.2:latest", "llama3.2:latest"),
        ("llama3.2:3b", "llama3.2:3b"),
        ("library/llama3.2", "llama3.2:latest"),
        ("registry.ollama.ai/library/llama3.2:latest", "llama3.2:latest"),
        ("Registry.Ollama.AI/Library/Llama3.2", "Llama3.2:latest"),
        ("user/model", "user/model:latest"),
        ("registry.ollama.ai/user/model:7b", "user/model:7b"),
        ("hf.co/user/repo:Q4_K_M", "hf.co/user/repo:Q4_K_M"),
        ("hf.co/user/repo", "hf.co/user/repo:latest"),
        ("https://hf.co/user/repo:Q8_0", "hf.co/user/repo:Q8_0"),
        ("localhost:5000/ns/model", "localhost:5000/ns/model:latest"),
        ("llama3.2@sha256:" + "a" * 64, "llama3.2:latest"),
        ("llama3.2:1b@sha256:" + "b" * 64, "llama3.2:1b"),
        ("gpt-oss:120b-cloud", "gpt-oss:120b-cloud"),
    ],
)
def test_canonical_model(name: str, canonical: str) -> None:
    assert canonical_model(name) == canonical


def test_model_key_is_case_insensitive() -> None:
    assert model_key("LLAMA3.2") == model_key("registry.ollama.ai/library/llama3.2:latest")
    assert model_key("llama3.2:1b") != model_key("llama3.2")


@pytest.mark.parametrize(
    "name",
    [
        "tell me a secret",
        "",
        ":latest",
        "llama3.2:",
        "/m",
        "-model",
        "a" * 81,
        "m:" + "t" * 81,
        "x\n",
    ],
)
def test_names_ollama_refuses_are_invalid(name: str) -> None:
    assert not is_valid_name(name)

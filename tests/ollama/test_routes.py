"""Route templates, route groups and families."""

from __future__ import annotations

import pytest

from ollama_tap import ollama

STATIC_ROUTES = sorted(ollama.ENDPOINTS - {"/api/blobs/:digest", "/v1/models/:model"})


@pytest.mark.parametrize("route", STATIC_ROUTES)
def test_every_static_route_is_its_own_template(route: str) -> None:
    assert ollama.endpoint_of(route) == route


@pytest.mark.parametrize(("path", "endpoint"), [
    ("/api/blobs/sha256:" + "a" * 64, "/api/blobs/:digest"),
    ("/v1/models/llama3.2:latest", "/v1/models/:model"),
    ("/v1/models/library/llama3", "other"),
    ("/v1/models/", "other"),
    ("/api/blobs/", "other"),
    ("/api/generate/", "other"),
    ("//api/chat", "other"),
    ("/API/chat", "other"),
    ("/api/chat?x=1", "/api/chat"),
    ("/api/%63hat", "/api/chat"),
    ("/api%2Fchat", "/api/chat"),
    ("/api/chat%zz", "other"),
    ("/api/stop", "other"),
    ("/metrics", "other"),
    ("", "other"),
    ("/v1/images/generations", "other"),
])  # fmt: skip
def test_odd_paths(path: str, endpoint: str) -> None:
    assert ollama.endpoint_of(path) == endpoint


def test_endpoint_groups() -> None:
    assert ollama.NATIVE_GENERATION < ollama.INFERENCE_ENDPOINTS
    assert "/v1/messages" in ollama.INFERENCE_ENDPOINTS
    groups = [
        ollama.INFERENCE_ENDPOINTS,
        ollama.EMBEDDING_ENDPOINTS,
        ollama.POLLING_ENDPOINTS,
        ollama.MANAGEMENT_ENDPOINTS,
    ]
    assert sum(len(group) for group in groups) == len(frozenset().union(*groups))
    assert frozenset().union(*groups) <= ollama.ENDPOINTS


@pytest.mark.parametrize(("endpoint", "family"), [
    ("/api/chat", "ollama"),
    ("/", "ollama"),
    ("other", "ollama"),
    ("/v1/chat/completions", "openai"),
    ("/v1/models/:model", "openai"),
    ("/v1/messages", "anthropic"),
])  # fmt: skip
def test_family_of(endpoint: str, family: str) -> None:
    assert ollama.family_of(endpoint) == family

"""Model names by Ollama's rules (types/model/name.go): how it parses, completes and compares
them, and which it refuses."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

DEFAULT_HOST: Final = "registry.ollama.ai"
DEFAULT_NAMESPACE: Final = "library"
DEFAULT_TAG: Final = "latest"

# Ollama's part rules (types/model/name.go): a first character that is alphanumeric or "_",
# then alphanumerics, "_", "-", "."; a host may also hold ":" (a port). Lengths as Ollama's.
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")


def _split(name: str) -> tuple[str | None, str | None, str, str | None]:
    """Host, namespace, model and tag as Ollama's ParseNameBare cuts them (None when absent,
    "" when present but empty, which Ollama refuses)."""
    name = name.partition("@")[0]  # a digest pins a version of the model the name names
    host = namespace = tag = None
    if name.rfind(":") > name.rfind("/"):
        name, _, tag = name.rpartition(":")
    rest, slash, model = name.rpartition("/")
    if slash:
        host, slash, namespace = rest.rpartition("/")
        # Ollama drops a scheme before the host.
        host = (host.partition("://")[2] or host) if slash else None
    return host, namespace, model, tag


def canonical_model(name: str) -> str:
    """The name as /api/tags prints it: implied host, namespace and tag made explicit,
    the default host and namespace then left out ("llama3.2" → "llama3.2:latest",
    "registry.ollama.ai/library/llama3.2" → "llama3.2:latest", "hf.co/u/r:Q4_K_M" kept).

    The spelling is kept; compare with `model_key` for Ollama's case-insensitive matching.
    """
    host, namespace, model, tag = _split(name)
    host, namespace, tag = host or DEFAULT_HOST, namespace or DEFAULT_NAMESPACE, tag or DEFAULT_TAG
    if host.lower() != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.lower() != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def model_key(name: str) -> str:
    """The key under which Ollama treats two names as one model (canonical, case-folded)."""
    return canonical_model(name).lower()


def is_valid_name(name: str) -> bool:
    """Whether Ollama would accept the name; anything else (a prompt pasted into `model`,
    random bytes) can never name a model, so it never becomes a label of its own."""
    host, namespace, model, tag = _split(name)
    return (
        bool(_PART.fullmatch(model))
        and (tag is None or bool(_PART.fullmatch(tag)))
        and (namespace is None or bool(_PART.fullmatch(namespace)))
        and (host is None or bool(_HOST.fullmatch(host)))
    )


_CACHED_LENGTH: Final = 1024
"""Longer `model` values (a pasted prompt, say) are checked each time, never kept."""


@lru_cache(maxsize=1024)
def _valid_key(name: str) -> tuple[str, str] | None:
    # Every request asks this of its `model` (labels, logs, records); clients send the same
    # few names, so the regexes run once per name rather than several times per request.
    return (model_key(name), canonical_model(name)) if is_valid_name(name) else None


def valid_key(name: str) -> tuple[str, str] | None:
    """(model_key, canonical name) when Ollama would accept `name`, else None."""
    return _valid_key(name) if len(name) <= _CACHED_LENGTH else _valid_key.__wrapped__(name)

"""Cloud exchanges (rules C1–C4 of docs/diagnoses.md): told from the request's model name or
the reply's remote-stub fields, and kept out of every local figure."""

from __future__ import annotations

from typing import Any, Final

from ollama_tap.exchange import Exchange

CLOUD: Final = "cloud"
LOCAL: Final = "local"


def is_cloud_model(name: object) -> bool:
    """C1: whether Ollama routes `name` to ollama.com, as `modelref.parseSourceSuffix` decides:
    the text after the last ":" is `cloud` (any case), or holds no "/" and ends in `-cloud`
    (`gpt-oss:120b-cloud`, `kimi-k2.5:cloud`). A name without a tag (`foo-cloud`) is local,
    and so is one ending `:local`."""
    if not isinstance(name, str) or ":" not in name:
        return False
    suffix = name.rpartition(":")[2].lower()
    return suffix == "cloud" or ("/" not in suffix and suffix.endswith("-cloud"))


def is_remote_stub(final: dict[str, Any] | None) -> bool:
    """C3: a legacy remote-stub model's replies carry `remote_model` and `remote_host` on
    every native chunk (the final object included)."""
    return final is not None and ("remote_host" in final or "remote_model" in final)


def location(ex: Exchange) -> str:
    """`cloud` for an exchange Ollama proxied to a remote (C1, C3), else `local`. C4: such an
    exchange never ran on this box, so its timings, token rates and context say nothing
    about the local runner."""
    return CLOUD if is_cloud_model(ex.model) or is_remote_stub(ex.final) else LOCAL

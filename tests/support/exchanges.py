"""Exchanges built by hand, for tests that drive readers, hooks and observers without a proxy."""

from __future__ import annotations

from typing import Any

from ollama_tap.exchange import Exchange


def new_exchange(
    endpoint: str = "/api/generate",
    *,
    method: str = "POST",
    query: str = "",
    client: str = "127.0.0.1",
    request_headers: dict[str, str] | None = None,
    **fields: Any,
) -> Exchange:
    """An exchange as the relay begins it; `fields` are any other Exchange fields.

    The path is the endpoint itself: no test here needs a raw path that differs from its
    route template."""
    ex = Exchange(
        method=method,
        path=endpoint,
        query=query,
        endpoint=endpoint,
        client=client,
        request_headers={} if request_headers is None else request_headers,
    )
    for name, value in fields.items():
        setattr(ex, name, value)
    return ex

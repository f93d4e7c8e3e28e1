"""Incoming: a request as a transport hands it to the exchange driver."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Protocol

from multidict import CIMultiDictProxy
from yarl import URL

from ollama_tap.facts import TraceIds


class BodySource(Protocol):
    """A request body as it streams in (the HTTP/1 server's BodyStream)."""

    def is_eof(self) -> bool: ...

    async def read(self) -> bytes: ...

    def iter_any(self) -> AsyncIterable[bytes]: ...


class Incoming:
    """Everything the driver reads of a request; the HTTP/1 server makes one per request."""

    def __init__(
        self,
        method: str,
        rel_url: URL,
        headers: CIMultiDictProxy[str],
        remote: str,
        arrived: float,
        content: BodySource,
        has_body: bool,
    ) -> None:
        self.method = method
        self.rel_url = rel_url
        """The origin-form target, exactly as the client encoded it."""
        self.headers = headers
        self.remote = remote
        """The client's address ("" when the transport does not know it)."""
        self.arrived = arrived
        """Monotonic time the request head arrived: where the exchange's clock starts."""
        self.content = content
        self.has_body = has_body
        self.trace_ids: TraceIds | None = None
        """The ids the upstream is told (`--otel-propagate`), once chosen."""

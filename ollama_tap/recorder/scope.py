"""Which exchanges are recorded, and how much of each (before the privacy mode applies)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ollama_tap.exchange import Exchange
from ollama_tap.ollama import routes
from ollama_tap.rawreply import RawReply
from ollama_tap.recorder.timeline import Timeline


class Scope(enum.Enum):
    """How much of an exchange is in scope; the privacy mode then takes away from it."""

    FULL = "full"
    """Inference and embeddings: bodies, output, tool calls, context, chunk timeline."""
    METADATA = "metadata"
    """Everything else (pull, push, create, copy, delete, blobs, show, ...): no bodies."""


def scope_of(ex: Exchange, record_routes: bool) -> Scope | None:
    """The scope of an exchange, or None when it is not recorded.

    Polling routes (and any other GET or HEAD) are recorded only with ``record_routes``:
    dashboards and clients poll them constantly and they say nothing about inference.
    """
    endpoint = ex.endpoint
    if endpoint in routes.INFERENCE_ENDPOINTS or endpoint in routes.EMBEDDING_ENDPOINTS:
        return Scope.FULL
    if endpoint in routes.MANAGEMENT_ENDPOINTS:
        return Scope.METADATA
    if endpoint in routes.POLLING_ENDPOINTS or ex.method in {"GET", "HEAD"}:
        return Scope.METADATA if record_routes else None
    return Scope.METADATA


@dataclass(slots=True, init=False)
class Capture:
    """The recorder's state on one exchange (``ex.metadata["recorder"]``)."""

    scope: Scope
    model: str | None
    """The canonical model name."""
    digest: str | None
    """The model's digest when the request arrived."""
    timeline: Timeline | None
    """Built by the chunk hook for inference exchanges."""
    version: str | None
    """Ollama's version when the request arrived (the poller's last /api/version read)."""
    raw: RawReply | None
    """The reply's bytes as relayed (full mode, from the request hook on), else None: the
    recorder's own reference, kept when the driver drops `Exchange.raw_reply` at its limit
    (the record then says it was dropped)."""

    def __init__(
        self, scope: Scope, model: str | None, digest: str | None, timeline: Timeline | None
    ) -> None:
        # Written out: one is made per request (docs/architecture.md, mypyc).
        self.scope, self.model, self.digest, self.timeline = scope, model, digest, timeline
        self.raw = None
        self.version = None

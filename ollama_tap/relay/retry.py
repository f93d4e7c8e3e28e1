"""When a request goes upstream a second time: the rule (the driver, relay/tap.py, applies it
once; relay/bodies.py has the body a second send reads).

A pooled connection the upstream closed while it sat idle (llama-server closes one after a
streamed reply without saying so; nginx, Caddy and load balancers close idle ones; Ollama
restarts) fails the request written to it with an end of file or a reset and no reply byte.
So does a connection whose upstream read the request and then died: the proxy cannot tell
the two apart. The rule therefore follows what a second send would cost:

- idempotent methods (RFC 9112 §9.3.1) and the inference and embedding routes, where a
  repeat costs GPU time and changes no state, are sent again, once, on a fresh connection;
- management routes (pull, push, create, copy, delete, blobs) never are, whatever the method;
- only when the connection had carried an earlier exchange (a fresh one that fails is the
  upstream's answer), no byte of this reply arrived, and every body byte sent is at hand.
"""

from __future__ import annotations

from typing import Final

from ollama_tap.exchange import Exchange, Retry
from ollama_tap.ollama.routes import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS, MANAGEMENT_ENDPOINTS

IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""Methods a client may send again after a connection failure (RFC 9112 §9.3.1)."""
RESENDABLE_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes a second send of which costs compute and changes nothing."""


def may_resend(method: str, endpoint: str) -> bool:
    """Whether sending this request twice can do no harm."""
    if endpoint in MANAGEMENT_ENDPOINTS:
        return False
    return method in IDEMPOTENT or endpoint in RESENDABLE_ENDPOINTS


def retry_reason(ex: Exchange, *, reused: bool, replied: bool, reset: bool) -> Retry | None:
    """Why the request of `ex`, whose connection ended before its reply was complete, may be
    sent once more on a fresh connection; None when it must not be.

    `reused`: the connection had carried an earlier exchange; `replied`: some byte of this
    reply arrived; `reset`: it ended by a reset rather than a close. The caller still needs
    every body byte it sent at hand, and a client that is still there.
    """
    if ex.retried is not None or not reused or replied:
        return None
    if not may_resend(ex.method, ex.endpoint):
        return None
    return Retry.RESET if reset else Retry.CLOSED

"""When a request goes upstream a second time: the one rule both transports follow, and the
streamed body a second send reads.

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

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final

from ollama_tap.exchange import Exchange, Retry
from ollama_tap.ollama.routes import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS, MANAGEMENT_ENDPOINTS
from ollama_tap.relay.failures import UpstreamGone

IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""Methods a client may send again after a connection failure (RFC 9112 §9.3.1)."""
RESENDABLE_ENDPOINTS: Final = INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS
"""Routes a second send of which costs compute and changes nothing."""


def may_resend(method: str, endpoint: str) -> bool:
    """Whether sending this request twice can do no harm."""
    if endpoint in MANAGEMENT_ENDPOINTS:
        return False
    return method in IDEMPOTENT or endpoint in RESENDABLE_ENDPOINTS


def retry_reason(ex: Exchange, reused: bool, replied: bool, reset: bool) -> Retry | None:
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


class Upload:
    """A streamed request body as one send reads it: on a second send, the bytes the first
    one took go first, then the rest as it streams in.

    A send that failed may still be inside a read of the body (aiohttp's writer is
    cancelled, not awaited): `settled` waits for it to leave, so that the piece it takes is
    teed before the second send is built, and it reads nothing from then on.
    """

    def __init__(self, body: AsyncIterator[bytes], first: bytes = b"") -> None:
        self.body = body
        self.first = first
        self.reading = False
        self.retired = False
        self._left: asyncio.Future[None] | None = None

    def __aiter__(self) -> Upload:
        return self

    async def __anext__(self) -> bytes:
        if self.retired:
            raise UpstreamGone("the request is being sent again on another connection")
        if self.first:
            first, self.first = self.first, b""
            return first
        self.reading = True
        try:
            return await self.body.__anext__()
        finally:
            self.reading = False
            if self._left is not None and not self._left.done():
                self._left.set_result(None)

    async def settled(self) -> None:
        """Retire this view of the body, once no read of it is under way."""
        self.retired = True
        if self.reading:
            self._left = asyncio.get_running_loop().create_future()
            await self._left


async def held_for_resend(
    upload: Upload | None, sent_so_far: Callable[[], bytes | None]
) -> bytes | None:
    """What a second send writes before the rest of a streamed body: nothing for a body read
    whole (resent from memory), the upload's bytes so far once the failed send has left it
    (`Upload.settled`), or None when they are not all at hand and no second send is made."""
    if upload is None:
        return b""
    await upload.settled()
    return sent_so_far()

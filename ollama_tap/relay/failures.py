"""The data path's exceptions, and what the proxy answers when the upstream gave no reply.

Plain Python, not compiled: a compiled class cannot derive from ConnectionError.
"""

from __future__ import annotations

from typing import Final

import aiohttp
from yarl import URL


class UpstreamGone(ConnectionError):
    """The upstream closed, broke or garbled the connection before its reply was complete."""

    def __init__(self, message: str, unanswered: bool = False, reset: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered
        """The connection ended, by a close or a reset, before any byte of the reply came:
        on a reused connection, the upstream may not have read the request (retry.py)."""
        self.reset = reset
        """It ended by a reset, not a close."""


class UpstreamUnreachable(ConnectionError):
    """No connection to the upstream could be opened; the message names host, port and why."""


class ClientGone(ConnectionResetError):
    """The client closed its connection while its request body was still arriving."""


AIOHTTP_BROKEN_OFF: Final = (
    aiohttp.ClientConnectionResetError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientResponseError,
    aiohttp.ClientPayloadError,
)
"""How aiohttp's client says the upstream accepted the connection but gave no valid reply."""

READ_TIMEOUT_MESSAGE: Final = "Timeout on reading data from socket"
"""aiohttp's words for a silent upstream: both transports report one alike."""

INTERNAL_ERROR: Final = "ollama-tap: internal error while relaying this request; see the proxy log."
REFUSED_PIPELINED: Final = (
    "ollama-tap: this request was pipelined behind another on the same connection, and "
    "requests to /_tap/, the metrics path or in HTTP/1.0 must come first on theirs"
)
"""The 400 for a request the HTTP/1 transport cannot hand to aiohttp's server: it began in
the read that ended the request before it."""


def unparseable_after(error: str) -> str:
    """The 400 for bytes that do not parse behind a request in the same read (the request
    before them is answered first; then the connection closes)."""
    return (
        "ollama-tap: what followed the previous request on this connection is not an "
        f"HTTP/1.1 request ({error}); the client must send well-formed requests only"
    )


def broken_reason(exc: BaseException) -> str:
    """What the upstream did wrong, on one line (aiohttp's parser errors quote the bytes
    they choked on over several lines, inside the response error's own repr)."""
    text = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split()) or 'no detail'}"


def no_reply(upstream: URL, exc: BaseException, broken_off: bool) -> tuple[int, str]:
    """The proxy's 502 or 504 when the upstream gave no reply: no connection, no answer in
    time, or (`broken_off`) a connection that ended without a valid reply."""
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return 504, (
            f"ollama-tap: Ollama at {upstream} did not answer in time ({reason}); "
            "check that it is running, or raise --connect-timeout / --read-timeout."
        )
    if broken_off:
        # Connected, but what came back was no reply: "cannot reach" would send the
        # operator looking for a stopped Ollama instead of a crashed one.
        return 502, (
            f"ollama-tap: Ollama at {upstream} broke off the exchange without a "
            f"valid reply ({broken_reason(exc)}); check its log, or what else listens there."
        )
    return 502, (
        f"ollama-tap: cannot reach Ollama at {upstream}: {reason}; "
        "start Ollama or point --upstream / OLLAMA_TAP_UPSTREAM at it."
    )

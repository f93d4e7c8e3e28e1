"""The data path's exceptions, and what the proxy answers when the upstream gave no reply.

Plain Python, not compiled: a compiled class cannot derive from ConnectionError.
"""

from __future__ import annotations

from typing import Final

from yarl import URL


class UpstreamGone(ConnectionError):
    """The upstream closed, broke or garbled the connection before its reply was complete."""

    def __init__(
        self, message: str, *, unanswered: bool = False, reset: bool = False, reused: bool = False
    ) -> None:
        super().__init__(message)
        self.unanswered = unanswered
        """The connection ended, by a close or a reset, before any byte of the reply came:
        on a reused connection, the upstream may not have read the request (retry.py)."""
        self.reset = reset
        """It ended by a reset, not a close."""
        self.reused = reused
        """The connection had carried an earlier exchange (a fresh one that fails is the
        upstream's answer, never sent again)."""


class UpstreamUnreachable(ConnectionError):
    """No connection to the upstream could be opened; the message names host, port and why."""


class StageError(RuntimeError):
    """An exchange was told of a step its stage does not allow (relay/tapped.py): a bug of
    the proxy's."""


class ClientGone(ConnectionResetError):
    """The client closed its connection while its request body was still arriving."""


READ_TIMEOUT_MESSAGE: Final = "Timeout on reading data from socket"
"""What a silent upstream is reported as (aiohttp's words, which the app's own client
uses too)."""

INTERNAL_ERROR: Final = "ollama-tap: internal error while relaying this request; see the proxy log."
REFUSED_PIPELINED: Final = (
    "ollama-tap: this request was pipelined behind another on the same connection, and "
    "requests to /_tap/ and the metrics path must come first on theirs; send them on a "
    "connection of their own"
)
"""The 400 for a request for the proxy's own paths that the HTTP/1 server cannot hand to
aiohttp's server: it began in the read that ended the request before it."""


def unparseable(error: str) -> str:
    """The 400 for bytes that do not parse as a request (the request before them, if any,
    is answered first; then the connection closes)."""
    return (
        f"ollama-tap: the request could not be parsed as HTTP/1.1 ({error}); "
        "the client must send well-formed requests only"
    )


def broken_reason(exc: BaseException) -> str:
    """What the upstream did wrong, on one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no detail'}"


def no_reply(upstream: URL, exc: BaseException, *, broken_off: bool) -> tuple[int, str]:
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

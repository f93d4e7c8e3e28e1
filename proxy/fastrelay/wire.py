"""HTTP/1.1 bytes the fast relay writes itself: request heads and chunk frames."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aiohttp import hdrs

from proxy.forward import NOT_UPSTREAM, kept_headers

_BODYLESS_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
"""Methods sent without `Content-Length: 0` when they carry no body (as aiohttp's client)."""
_WRITELINES_FROM: Final = 16 * 1024
"""Above this size a chunk is framed by writelines instead of being copied into one buffer."""
LAST_CHUNK: Final = b"0\r\n\r\n"


def text(raw: bytes) -> str:
    """Header bytes as text; undecodable bytes survive the round trip (surrogateescape)."""
    return raw.decode("utf-8", "surrogateescape")


def head(first_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """A request or status line and its headers as HTTP/1.1 bytes, ending with the blank line
    (header bytes that were not UTF-8 go back out as they came: surrogateescape)."""
    lines = [first_line]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def upstream_head(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    host: str,
    body: bytes | None,
    streamed: bool,
) -> tuple[bytes, bool]:
    """The request head the fast relay sends upstream, as aiohttp's client would send the
    same request: Host first, rewritten; the client's headers in order minus hop-by-hop
    ones; and the body framing aiohttp's client would add, nothing else. Also whether the
    body goes chunked.

    The client's own `Content-Length` passes through; without one, a body that streams in is
    sent chunked, a body at hand gets its length, and a bodyless POST/PUT/... says 0.
    """
    kept = kept_headers(headers, NOT_UPSTREAM)
    chunked = False
    if not any(name.lower() == "content-length" for name, _ in kept):
        if streamed:
            kept.append((hdrs.TRANSFER_ENCODING, "chunked"))
            chunked = True
        elif body is not None:
            kept.append((hdrs.CONTENT_LENGTH, str(len(body))))
        elif method not in _BODYLESS_METHODS:
            kept.append((hdrs.CONTENT_LENGTH, "0"))
    return head(f"{method} {target} HTTP/1.1", [(hdrs.HOST, host), *kept]), chunked


def chunk_frames(data: bytes) -> tuple[bytes, ...]:
    """`data` as one HTTP/1.1 chunk: one buffer when small, three (no copy) when large."""
    if len(data) < _WRITELINES_FROM:
        return (b"%x\r\n%b\r\n" % (len(data), data),)
    return (b"%x\r\n" % len(data), data, b"\r\n")

"""HTTP/1.1 bytes the fast relay writes itself: request heads and chunk frames."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aiohttp import hdrs
from multidict import CIMultiDict

_BODYLESS_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
"""Methods sent without `Content-Length: 0` when they carry no body (as aiohttp's client)."""
_WRITELINES_FROM: Final = 16 * 1024
"""Above this size a chunk is framed by writelines instead of being copied into one buffer."""
LAST_CHUNK: Final = b"0\r\n\r\n"


def text(raw: bytes) -> str:
    """Header bytes as text; undecodable bytes survive the round trip (surrogateescape)."""
    return raw.decode("utf-8", "surrogateescape")


def frame_headers(headers: CIMultiDict[str], body: bytes | None, streamed: bool) -> None:
    """Add the body framing aiohttp's client would add, and nothing else.

    The client's own `Content-Length` passes through; without one, a body that streams in is
    sent chunked, a body at hand gets its length, and a bodyless POST/PUT/... says 0.
    """
    if hdrs.CONTENT_LENGTH in headers:
        return
    if streamed:
        headers[hdrs.TRANSFER_ENCODING] = "chunked"
    elif body is not None:
        headers[hdrs.CONTENT_LENGTH] = str(len(body))


def needs_zero_length(method: str, headers: CIMultiDict[str]) -> bool:
    return method not in _BODYLESS_METHODS and hdrs.CONTENT_LENGTH not in headers


def head(first_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """A request or status line and its headers as HTTP/1.1 bytes, ending with the blank line
    (header bytes that were not UTF-8 go back out as they came: surrogateescape)."""
    lines = [first_line]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def request_head(method: str, target: str, headers: CIMultiDict[str]) -> bytes:
    """The request line and headers, Host first (as aiohttp's client orders them)."""
    host: list[tuple[str, str]] = []
    rest: list[tuple[str, str]] = []
    for item in headers.items():  # one pass: this runs for every request
        (host if item[0].lower() == "host" else rest).append(item)
    return head(f"{method} {target} HTTP/1.1", host + rest)


def chunk_frames(data: bytes) -> tuple[bytes, ...]:
    """`data` as one HTTP/1.1 chunk: one buffer when small, three (no copy) when large."""
    if len(data) < _WRITELINES_FROM:
        return (b"%x\r\n%b\r\n" % (len(data), data),)
    return (b"%x\r\n" % len(data), data, b"\r\n")

"""The header rules of the data path, pure: what goes upstream, what comes back, and the
heads the HTTP/1 server writes (table-tested in tests/relay/test_headers.py)."""

from __future__ import annotations

import email.utils
import http
import os
from collections.abc import Callable, Iterable
from typing import Final

from aiohttp import hdrs
from aiohttp.http import SERVER_SOFTWARE
from yarl import URL

from ollama_tap.config import Settings
from ollama_tap.otel.config import enabled as otel_enabled
from ollama_tap.relay.incoming import Incoming
from ollama_tap.tracecontext import as_sent, propagated

Pairs = Iterable[tuple[str, str]]

HOP_BY_HOP: Final = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Trailers",
        "Transfer-Encoding",
        "Upgrade",
    )
)
"""RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy ones proxies still meet."""
NOT_UPSTREAM: Final = HOP_BY_HOP | {"host", "expect"}
"""What never goes upstream as the client sent it: Host is rewritten, and an `Expect:
100-continue` the proxy met itself (http1/server.py), so the upstream is not asked to meet it
again (an upstream may ignore Expect, as RFC 9110 allows, and the body would then wait)."""
NOT_UPSTREAM_REWRITTEN: Final = NOT_UPSTREAM | {"content-length"}
"""A body the reload guard rewrote goes with its own length."""
_BODYLESS_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
"""Methods sent without `Content-Length: 0` when they carry no body (as aiohttp's client)."""
_WRITELINES_FROM: Final = 16 * 1024
"""Above this size a chunk is framed by writelines instead of being copied into one buffer."""
LAST_CHUNK: Final = b"0\r\n\r\n"
MAX_FIELD: Final = 65536
"""Bytes of one header name or value the proxy takes, both ways (the front checks it, and
the app configures aiohttp's server and client with it; llhttp has no limit of its own)."""
IDLE_SECONDS: Final = 15.0
"""An idle upstream connection older than this is closed, not reused (aiohttp's keep-alive
timeout): it may be closing at the upstream's end just as a request is written to it."""
KEEP_ALIVE_MARGIN: Final = 1.0
"""Seconds taken off the idle life an upstream announces (`Keep-Alive: timeout=N`): in its
last moments the connection may be closing at the upstream's end as a request is written."""


class UpstreamTarget:
    """Where requests go: the upstream's origin, its Host value and Ollama's path prefix (if
    OLLAMA_HOST had one); only these change in a request's target."""

    def __init__(self, url: URL, *, propagate: bool = False) -> None:
        self.url = url
        self.propagates = propagate
        # Chosen once: without --otel-propagate the client's headers are read as they are.
        self.headers_of: Callable[[Incoming], Pairs] = propagated if propagate else as_sent
        self.prefix = url.raw_path.rstrip("/")
        host = f"[{url.host}]" if url.host and ":" in url.host else str(url.host)
        self.host = f"{host}:{url.port}" if url.port else host

    def path(self, raw_path_qs: str) -> str:
        """The upstream request target: the client's exact path and query encoding (`//` and
        dot segments included) behind the prefix. Callers pass the origin-form target, so a
        request line in absolute form does not carry its origin along."""
        return self.prefix + raw_path_qs


def target_of(settings: Settings, url: URL | None = None) -> UpstreamTarget:
    """The upstream of `settings` (or the box at `url`); the span's traceparent is sent up
    only with --otel-propagate while spans are exported at all."""
    propagate = settings.otel_propagate and otel_enabled(settings, os.environ)
    return UpstreamTarget(url or settings.upstream_url, propagate=propagate)


def kept_headers(headers: Pairs, fixed: frozenset[str]) -> list[tuple[str, str]]:
    """The headers, in order, minus `fixed` (lower-case names) and those a Connection header
    names (RFC 9110 §7.6.1)."""
    pairs = headers if isinstance(headers, list) else list(headers)
    drop = fixed
    for name, value in pairs:
        if name.lower() == "connection":  # a set is built only for a Connection header
            drop = drop | {t.strip().lower() for t in value.split(",")}
    return [(k, v) for k, v in pairs if k.lower() not in drop]


def text(raw: bytes) -> str:
    """Header bytes as text; undecodable bytes survive the round trip (surrogateescape)."""
    return raw.decode("utf-8", "surrogateescape")


def head(first_line: str, headers: Pairs) -> bytes:
    """A request or status line and its headers as HTTP/1.1 bytes, ending with the blank line
    (header bytes that were not UTF-8 go back out as they came: surrogateescape)."""
    lines = [first_line]
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def upstream_head(
    method: str,
    target: str,
    headers: Pairs,
    host: str,
    body: bytes | None,
    *,
    streamed: bool,
    rewritten: bool = False,
) -> tuple[bytes, bool]:
    """The request head sent upstream, always HTTP/1.1: Host first, rewritten; the client's
    headers in order minus hop-by-hop ones (and `Expect`); and the body framing, nothing
    else. Also whether the body goes chunked.

    The client's own `Content-Length` passes through, unless the body was `rewritten` (the
    reload guard); without one, a body that streams in is sent chunked, a body at hand gets
    its length, and a bodyless POST/PUT/... says 0.
    """
    kept = kept_headers(headers, NOT_UPSTREAM_REWRITTEN if rewritten else NOT_UPSTREAM)
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


def response_head(
    status: int, reason: str, headers: Pairs, method: str, *, keep_alive: bool, version: str
) -> tuple[bytes, bool, bool]:
    """The client's response head for this upstream reply, and how its body is framed:
    whether it goes chunked, and whether it ends with the connection.

    The upstream's headers in their order minus hop-by-hop ones. A body without a length is
    chunked for an HTTP/1.1 client; an HTTP/1.0 client has no chunking, so the body ends
    where the connection closes (RFC 9112 §6.3). A reply that must be empty keeps no
    Transfer-Encoding, nor a Content-Length on 1xx/204/304. The status line carries the
    client's version, as Ollama's server writes it; `Connection: close` goes to an HTTP/1.1
    client whose connection ends after it, `Connection: keep-alive` to an HTTP/1.0 one whose
    connection stays. Nothing else is added.
    """
    out = kept_headers(headers, HOP_BY_HOP)  # Connection too: only what is kept is added back
    empty = method == "HEAD" or status in (204, 304) or status < 200
    chunked = until_close = False
    if empty:
        if status < 200 or status in (204, 304):
            out = [(k, v) for k, v in out if k.lower() != "content-length"]
    elif not any(k.lower() == "content-length" for k, _ in out):
        if version == "1.1":
            out.append((hdrs.TRANSFER_ENCODING, "chunked"))
            chunked = True
        else:
            until_close = True
    if version == "1.1":
        if not keep_alive:
            out.append((hdrs.CONNECTION, "close"))
    elif keep_alive and not until_close:
        out.append((hdrs.CONNECTION, "keep-alive"))
    return head(f"HTTP/{version} {status} {reason}", out), chunked, until_close


def interim_head(status: int, reason: str, headers: Pairs) -> bytes:
    """An interim (1xx) reply of the upstream as the client gets it: minus hop-by-hop
    headers (an HTTP/1.1 client only; RFC 9110 §15.2 forbids them to HTTP/1.0 ones)."""
    return head(f"HTTP/1.1 {status} {reason}", kept_headers(headers, HOP_BY_HOP))


def error_response(
    status: int,
    body: bytes,
    *,
    keep_alive: bool,
    version: str = "1.1",
    date: str | None = None,
    content_type: str | None = "application/json",
) -> bytes:
    """A response the proxy makes itself, as bytes, with the head aiohttp's server gives the
    same `web.Response` (Content-Type, Content-Length, Date, Server), on the connection's
    terms: `Connection: close` when an HTTP/1.1 connection ends after it, `keep-alive` when an
    HTTP/1.0 one stays. `date` defaults to now; `content_type` None leaves it out (an empty
    body)."""
    headers = [(hdrs.CONTENT_TYPE, content_type)] if content_type is not None else []
    headers += [
        (hdrs.CONTENT_LENGTH, str(len(body))),
        (hdrs.DATE, date or email.utils.formatdate(usegmt=True)),
        (hdrs.SERVER, SERVER_SOFTWARE),
    ]
    if version == "1.1" and not keep_alive:
        headers.append((hdrs.CONNECTION, "close"))
    elif version != "1.1" and keep_alive:
        headers.append((hdrs.CONNECTION, "keep-alive"))
    phrase = http.HTTPStatus(status).phrase
    return head(f"HTTP/{version} {status} {phrase}", headers) + body


def idle_life(keep_alive: str | None) -> float:
    """How long an upstream connection may wait idle after a reply whose `Keep-Alive` header
    is `keep_alive`: IDLE_SECONDS, or less when its `timeout=N` says it closes sooner."""
    for param in (keep_alive or "").split(","):
        key, _, seconds = param.partition("=")
        seconds = seconds.strip()
        if key.strip().lower() == "timeout" and seconds.isascii() and seconds.isdigit():
            return min(IDLE_SECONDS, int(seconds) - KEEP_ALIVE_MARGIN)
    return IDLE_SECONDS


def chunk_frames(data: bytes) -> tuple[bytes, ...]:
    """`data` as one HTTP/1.1 chunk: one buffer when small, three (no copy) when large."""
    if len(data) < _WRITELINES_FROM:
        return (b"%x\r\n%b\r\n" % (len(data), data),)
    return (b"%x\r\n" % len(data), data, b"\r\n")

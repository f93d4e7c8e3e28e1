"""Which way a request goes: relayed by the HTTP/1 server, handed to aiohttp's server (the
proxy's own paths, one request per connection), or refused with the proxy's own error."""

from __future__ import annotations

from typing import Final

from aiohttp import hdrs, web
from multidict import CIMultiDictProxy

from ollama_tap.hostcheck import allowed_host
from ollama_tap.ollama import error_body, family_of
from ollama_tap.ollama.routes import endpoint_of
from ollama_tap.relay.headers import MAX_FIELD, error_response
from ollama_tap.relay.http1.request import FrontRequest

MAX_TARGET: Final = 8190
"""Bytes of a request target past which it is refused (aiohttp's limit on a request line)."""
RELAY: Final = "relay"
OWN: Final = "own"
"""`Rule.route`: the front relays the request; aiohttp's server answers it."""


class Refusal:
    """A request the front answers itself with an error (in the route family's shape, or
    empty), after which the connection closes: what follows it cannot be trusted."""

    def __init__(self, status: int, message: str | None) -> None:
        self.status = status
        self.message = message
        """None: an empty body (the host check's 403, as Ollama answers it)."""

    def response(self, path: str, version: str) -> bytes:
        """The bytes of the answer to a request for `path` ("" when unknown)."""
        version = version if version in ("1.0", "1.1") else "1.1"
        if self.message is None:
            return error_response(
                self.status, b"", keep_alive=False, version=version, content_type=None
            )
        family = family_of(endpoint_of(path)) if path else "ollama"
        body = error_body(family, self.status, self.message)
        return error_response(self.status, body, keep_alive=False, version=version)


FORBIDDEN: Final = Refusal(403, None)
"""Ollama's answer to a Host its DNS-rebinding check refuses: 403, empty body."""
TOO_LARGE: Final = Refusal(
    431, "ollama-tap: the request head is larger than 128 KiB; send fewer or shorter headers"
)


class OwnedPaths:
    """The paths the proxy answers itself (/_tap/*, the metrics path), as the app's router
    has them: a new route needs no second mention here."""

    def __init__(self, router: web.UrlDispatcher) -> None:
        exact: set[str] = set()
        prefixes: set[str] = set()
        for resource in router.resources():
            canonical = resource.canonical
            if "{" in canonical:
                prefixes.add(canonical.split("{", 1)[0])
            else:
                exact.add(canonical)
        self.exact = frozenset(exact)
        self.prefixes = tuple(sorted(prefixes))

    def __contains__(self, path: str) -> bool:
        return path in self.exact or path.startswith(self.prefixes)


class Rule:
    """The one rule that says where a request the HTTP/1 server parsed goes."""

    def __init__(self, owned: OwnedPaths, *, check_host: bool) -> None:
        self.owned = owned
        self.check_host = check_host
        """On a loopback bind: a Host the DNS-rebinding check refuses gets Ollama's 403."""

    def route(self, version: str, request: FrontRequest, target: str) -> str | Refusal:
        """RELAY, OWN or the refusal of `request`, whose target in origin form is `target`
        ("" when it was neither a path nor an absolute URI)."""
        headers = request.headers
        refusal = framing_refusal(version, request.method, target, headers, request.longest_field)
        if refusal is not None:
            return refusal
        if request.path in self.owned:
            return OWN  # aiohttp's middleware makes the host check there
        if self.check_host and not allowed_host(headers.get(hdrs.HOST, "")):
            return FORBIDDEN
        return RELAY


def framing_refusal(
    version: str, method: str, target: str, headers: CIMultiDictProxy[str], longest: int
) -> Refusal | None:
    """Why a request cannot be relayed as HTTP/1.1 with one framing, if it cannot: an
    unknown version, a target that is no path, a head past aiohttp's limits, an ambiguous
    Host or body length (RFC 9112 §3.2, §6.3), an unknown coding or expectation."""
    if version not in ("1.0", "1.1"):
        return Refusal(505, f"ollama-tap: HTTP/{version} is not supported; send HTTP/1.1")
    if method == "CONNECT":
        return Refusal(
            405,
            "ollama-tap: CONNECT is not supported: this is Ollama's address, not a forward "
            "proxy; set it as the client's Ollama host instead of its proxy",
        )
    if not target:
        return Refusal(
            400, "ollama-tap: the request target is not a path; send one such as /api/chat"
        )
    if len(target) > MAX_TARGET:
        return Refusal(414, f"ollama-tap: the URL is longer than {MAX_TARGET} bytes; shorten it")
    if longest > MAX_FIELD:
        return Refusal(
            431, f"ollama-tap: a request header is longer than {MAX_FIELD} bytes; shorten it"
        )
    hosts = len(headers.getall(hdrs.HOST, ()))
    if hosts > 1 or (hosts == 0 and version == "1.1"):
        return Refusal(400, "ollama-tap: an HTTP/1.1 request needs exactly one Host header")
    if len(headers.getall(hdrs.CONTENT_LENGTH, ())) > 1:
        return Refusal(400, "ollama-tap: the request has more than one Content-Length; send one")
    te = headers.getall(hdrs.TRANSFER_ENCODING, ())
    if te:
        if version == "1.0" or hdrs.CONTENT_LENGTH in headers:
            return Refusal(
                400,
                "ollama-tap: the request's body length is ambiguous (Transfer-Encoding with "
                "Content-Length, or in HTTP/1.0); send one Content-Length",
            )
        codings = [c.strip().lower() for value in te for c in value.split(",")]
        if codings != ["chunked"]:
            return Refusal(
                501,
                f"ollama-tap: Transfer-Encoding {', '.join(te)!r} is not supported; send the "
                "body with Content-Length or Transfer-Encoding: chunked",
            )
    expect = headers.get(hdrs.EXPECT)
    if expect is not None and expect.strip().lower() != "100-continue":
        return Refusal(
            417, "ollama-tap: only `Expect: 100-continue` is supported; leave Expect out"
        )
    return None


def origin_form(target: str) -> str:
    """The request target as a path and query: as sent, or the path of an absolute URI
    (RFC 9112 §3.2.2: a server must accept one); "" when it is neither."""
    if target.startswith("/"):
        return target
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return ""
    ends = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    if not ends:
        return "/"
    tail = rest[min(ends) :]
    return tail if tail.startswith("/") else "/" + tail

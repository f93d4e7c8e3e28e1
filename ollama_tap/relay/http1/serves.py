"""Which way a request goes: what the HTTP/1 transport relays itself; the rest (and every
later request on that connection) goes to aiohttp's server, whose handlers answer the proxy's
own paths and whose catch-all is the aiohttp transport."""

from __future__ import annotations

from typing import Final

from aiohttp import hdrs, web

from ollama_tap.hostcheck import allowed_host
from ollama_tap.relay.headers import MAX_FIELD
from ollama_tap.relay.http1.request import FrontRequest

MAX_TARGET: Final = 8190
"""aiohttp's limit on a request line: a request past it (or past MAX_FIELD) goes to aiohttp's
server, so it is answered exactly as aiohttp answers it."""


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
    """The one rule that picks the transport for a request the HTTP/1 server parsed."""

    def __init__(self, owned: OwnedPaths, check_host: bool) -> None:
        self.owned = owned
        self.check_host = check_host
        """On a loopback bind: a Host the DNS-rebinding check refuses goes to aiohttp, whose
        middleware gives Ollama's answer."""

    def serves(self, version: str, request: FrontRequest, target: str) -> bool:
        """Plain HTTP/1.1 requests in origin form for Ollama, framed one way only."""
        headers = request.headers
        if (
            version != "1.1"
            or request.method == "CONNECT"
            or not target.startswith("/")
            or len(target) > MAX_TARGET
            or request.path in self.owned
            or hdrs.EXPECT in headers
            or hdrs.UPGRADE in headers
            or len(headers.getall(hdrs.HOST, ())) != 1
            or len(headers.getall(hdrs.CONTENT_LENGTH, ())) > 1
            or request.longest_field > MAX_FIELD
        ):
            return False
        te = headers.getall(hdrs.TRANSFER_ENCODING, ())
        if te and (te != ["chunked"] or hdrs.CONTENT_LENGTH in headers):
            return False
        return not self.check_host or allowed_host(headers[hdrs.HOST])

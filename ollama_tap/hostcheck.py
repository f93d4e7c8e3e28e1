"""Ollama's own Host rule (allowedHostsMiddleware), applied by the proxy on loopback binds.

The proxy rewrites Host to the upstream's, which would switch off Ollama's defence against
DNS rebinding; so on a loopback bind it refuses the same requests Ollama would have refused,
on every route including /_tap/ and the metrics path, with Ollama's answer: 403, empty body.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from functools import lru_cache

from aiohttp import hdrs, web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_LOCAL_SUFFIXES = (".localhost", ".local", ".internal")
# Go's net.IP.IsPrivate: exactly these (Python's is_private covers more).
_PRIVATE = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)


@lru_cache(maxsize=1)
def local_addresses() -> tuple[str, frozenset[str]]:
    """This machine's hostname and the addresses it resolves to.

    Ollama accepts any address of a local interface (net.InterfaceAddrs); the standard
    library cannot list interfaces, so the addresses the hostname resolves to stand in.
    Loopback and private addresses are accepted by rule anyway, so the difference is at
    most a public address bound to this machine under another name. Resolved once, at
    start-up (make_app), because a lookup can block.
    """
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        infos = []
    return name.lower(), frozenset(str(info[4][0]) for info in infos)


def split_host(host_header: str) -> str | None:
    """The host part of a Host header as Go's net.SplitHostPort would give it.

    A bare host (no port) is taken as it is, as Ollama does when SplitHostPort fails; a
    bracketed IPv6 literal without a port (`[::1]`) stays unparseable, so it is refused,
    matching Ollama's corner case.
    """
    if host_header.startswith("["):
        end = host_header.find("]")
        if end < 0 or not host_header[end + 1 :].startswith(":"):
            return None
        return host_header[1:end]
    if host_header.count(":") == 1:
        return host_header.split(":", 1)[0]
    return host_header


@lru_cache(maxsize=256)
def allowed_host(host_header: str) -> bool:
    """Ollama's verdict on a Host header (cached: clients send the same few values)."""
    host = split_host(host_header)
    if host is None:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        private = any(ip in net for net in _PRIVATE if net.version == ip.version)
        return ip.is_loopback or ip.is_unspecified or private or str(ip) in local_addresses()[1]
    lowered = host.lower()
    return lowered in ("", "localhost", local_addresses()[0]) or lowered.endswith(_LOCAL_SUFFIXES)


@web.middleware
async def host_check(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not allowed_host(request.headers.get(hdrs.HOST, "")):
        return web.Response(status=403)
    return await handler(request)

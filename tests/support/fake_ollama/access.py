"""Ollama's Host and Origin rules for a loopback listener."""

from __future__ import annotations

import ipaddress
import socket


def _host_part(value: str) -> str:
    """The host of a Host header as Go's net.SplitHostPort sees it, or the raw value on error."""
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 and value[end + 1 : end + 2] == ":" else value
    return value.split(":")[0] if value.count(":") == 1 else value


_GO_PRIVATE = [
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
]


def host_allowed(host_header: str) -> bool:
    """Ollama's Host rule on a loopback listener."""
    host = _host_part(host_header)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address is not None and (
        address.is_loopback or address.is_unspecified or any(address in net for net in _GO_PRIVATE)
    ):
        return True
    host = host.lower()
    return host in ("", "localhost", socket.gethostname().lower()) or host.endswith(
        (".localhost", ".local", ".internal")
    )


_LOCAL_ORIGINS = tuple(
    f"{scheme}://{host}"
    for scheme in ("http", "https")
    for host in ("localhost", "127.0.0.1", "0.0.0.0")
)


def origin_allowed(origin: str, host: str) -> bool:
    """gin-contrib/cors with Ollama's default origins; same-origin always passes."""
    if origin in (f"http://{host}", f"https://{host}") or origin in _LOCAL_ORIGINS:
        return True
    return origin.startswith(
        (
            *(o + ":" for o in _LOCAL_ORIGINS),
            "app://",
            "file://",
            "tauri://",
            "vscode-webview://",
            "vscode-file://",
        )
    )

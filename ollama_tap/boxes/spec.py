"""Which Ollama boxes the tap fronts: `--upstream NAME=URL` (repeatable) or one plain URL,
each read by Ollama's own rules for its address (`resolve_upstream`).

A single plain URL (or none: OLLAMA_HOST, else the default) is one box named `default`, and
everything the tap shows stays as it is with one Ollama: no `upstream` label on the metrics,
no routing. Named boxes (`--upstream gpu1=http://a:11434 --upstream gpu2=http://b:11434`, or
OLLAMA_TAP_UPSTREAM=gpu1=http://a:11434,gpu2=http://b:11434) are routed between
(ollama_tap/boxes/router.py), and their names are the `upstream` label's values: bounded by
the configuration, as a label must be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from yarl import URL

from ollama_tap.credentials import redacted_url
from ollama_tap.settings_error import ConfigError

DEFAULT_UPSTREAM: Final = "http://127.0.0.1:11434"
DEFAULT_BOX: Final = "default"
"""The name of the one box a plain URL makes (records, logs and the API show it)."""
_NAMED: Final = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(.*)", re.DOTALL)
"""`NAME=URL`; a name has no ':' or '/', so a URL with a query is never taken for one."""


@dataclass(frozen=True, slots=True)
class BoxSpec:
    """One configured box: its name and Ollama's base URL."""

    name: str
    url: URL


def split_named(value: str) -> tuple[str | None, str]:
    """(`NAME`, `URL`) of `NAME=URL`; (None, value) for a plain URL."""
    found = _NAMED.fullmatch(value.strip())
    return (found[1], found[2]) if found else (None, value)


def parse_boxes(
    values: tuple[str, ...], ollama_host: str | None
) -> tuple[tuple[BoxSpec, ...], bool]:
    """The boxes of the `--upstream` values, and whether they were named.

    No value at all (then OLLAMA_HOST, else the default), or one plain URL, is the one
    `default` box. Several boxes must each be named, once: a name is how records, metrics
    and the management header tell them apart.
    """

    def resolve_url(text: str | None) -> URL:
        return resolve_upstream(text, ollama_host)

    parts = [split_named(v) for v in values if v.strip()]
    if not parts:
        return (BoxSpec(DEFAULT_BOX, resolve_url(None)),), False
    if len(parts) == 1 and parts[0][0] is None:
        return (BoxSpec(DEFAULT_BOX, resolve_url(parts[0][1])),), False
    boxes: list[BoxSpec] = []
    for name, url in parts:
        if name is None:
            raise ConfigError(
                f"upstream {url!r} has no name; with several upstreams give each as "
                "NAME=URL, e.g. --upstream gpu1=http://gpu1:11434 --upstream gpu2=http://gpu2:11434"
            )
        if any(b.name == name for b in boxes):
            raise ConfigError(f"upstream name {name!r} is given twice; give each box its own name")
        boxes.append(BoxSpec(name, resolve_url(url)))
    return tuple(boxes), True


def _strip(value: str) -> str:
    # envconfig.Var trims spaces and surrounding quotes.
    return value.strip().strip("\"'").strip()


def resolve_upstream(explicit: str | None, ollama_host: str | None) -> URL:
    """Ollama's URL: an explicit setting, else OLLAMA_HOST, else the default.

    Both are parsed by Ollama's own rules (envconfig.Host): no scheme means http and port
    11434; an explicit http:// or https:// defaults the port to 80 or 443; the bare value
    `ollama.com` means https://ollama.com:443; a path is kept; an empty, `0.0.0.0` or `::`
    host means loopback (as Ollama's ConnectableHost does for clients).
    """
    for raw in (explicit, ollama_host):
        if raw is not None and _strip(raw):
            return parse_ollama_host(_strip(raw))
    return URL(DEFAULT_UPSTREAM)


_API_PATH: Final = re.compile(r"/(api|v1)(/.*)?/*$")
"""A path that names Ollama's routes (`/api`, `/api/chat`, `/v1`): a mistake, since every
client adds it; a prefix before them (`/ollama`, Ollama behind a reverse proxy) is kept."""


def parse_ollama_host(value: str) -> URL:
    scheme, sep, hostport = value.partition("://")
    default_port = 11434
    if not sep:
        scheme, hostport = "http", value
        if value == "ollama.com":
            scheme, hostport = "https", "ollama.com:443"
    elif scheme == "http":
        default_port = 80
    elif scheme == "https":
        default_port = 443
    else:
        raise ConfigError(f"unsupported scheme in upstream {value!r}; use http:// or https://")
    hostport, _, path = hostport.partition("/")
    if "@" in hostport:
        raise ConfigError(
            f"upstream {redacted_url(value)!r} has a user name or password, which ollama-tap "
            "never sends on (Ollama has no login): give the host and port only, "
            "e.g. http://gpu-box:11434"
        )
    if api := _API_PATH.search("/" + path):
        base = f"{scheme}://{hostport}" + ("/" + path)[: api.start()]
        raise ConfigError(
            f"upstream {redacted_url(value)!r} names an API path ({api[0]}), which clients "
            f"add to every request themselves, so each would be a 404: give Ollama's base "
            f"URL, e.g. {redacted_url(base)}"
        )
    host, port = _split_host_port(hostport, default_port)
    if host in {"", "0.0.0.0", "::"}:
        host = "127.0.0.1"
    try:
        return URL.build(scheme=scheme, host=host, port=port, path="/" + path if path else "")
    except ValueError as exc:
        raise ConfigError(
            f"upstream {value!r} is not a host and port ({exc}); e.g. http://gpu-box:11434"
        ) from None


def _split_host_port(hostport: str, default_port: int) -> tuple[str, int]:
    host, port_text = hostport, ""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise ConfigError(f"upstream host {hostport!r} opens '[' without closing it")
        host, rest = hostport[1:end], hostport[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, port_text = hostport.split(":")
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        port = default_port
    return host, port if 0 <= port <= 65535 else default_port

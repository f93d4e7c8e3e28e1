"""Which Ollama boxes the tap fronts: `--upstream NAME=URL` (repeatable) or one plain URL.

A single plain URL (or none: OLLAMA_HOST, else the default) is one box named `default`, and
everything the tap shows stays as it is with one Ollama: no `upstream` label on the metrics,
no routing. Named boxes (`--upstream gpu1=http://a:11434 --upstream gpu2=http://b:11434`, or
OLLAMA_TAP_UPSTREAM=gpu1=http://a:11434,gpu2=http://b:11434) are routed between
(ollama_tap/boxes/router.py), and their names are the `upstream` label's values: bounded by
the configuration, as a label must be.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from yarl import URL

from ollama_tap.settings_error import ConfigError

DEFAULT_BOX: Final = "default"
"""The name of the one box a plain URL makes (records, logs and the API show it)."""
_NAMED: Final = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(.*)", re.DOTALL)
"""`NAME=URL`; a name has no ':' or '/', so a URL with a query is never taken for one."""
Resolve = Callable[[str | None], URL]
"""One URL by Ollama's rules (config.resolve_upstream): None is OLLAMA_HOST, else the default."""


@dataclass(frozen=True, slots=True)
class BoxSpec:
    """One configured box: its name and Ollama's base URL."""

    name: str
    url: URL


def split_named(value: str) -> tuple[str | None, str]:
    """(`NAME`, `URL`) of `NAME=URL`; (None, value) for a plain URL."""
    found = _NAMED.fullmatch(value.strip())
    return (found[1], found[2]) if found else (None, value)


def parse_boxes(values: tuple[str, ...], resolve_url: Resolve) -> tuple[tuple[BoxSpec, ...], bool]:
    """The boxes of the `--upstream` values, and whether they were named.

    `resolve_url(text)` parses one URL by Ollama's rules (config.resolve_upstream); no value
    at all, or one plain URL, is the one `default` box. Several boxes must each be named,
    once: a name is how records, metrics and the management header tell them apart.
    """
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

"""Model names by Ollama's rules, and the bounded set of `model` label values."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Final

DEFAULT_HOST: Final = "registry.ollama.ai"
DEFAULT_NAMESPACE: Final = "library"
DEFAULT_TAG: Final = "latest"
OTHER: Final = "other"
"""The label of every name beyond the cap (and of names Ollama would refuse)."""
NO_MODEL: Final = ""
"""The label of requests that name no model."""

# Ollama's part rules (types/model/name.go): a first character that is alphanumeric or "_",
# then alphanumerics, "_", "-", "."; a host may also hold ":" (a port). Lengths as Ollama's.
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")


def _split(name: str) -> tuple[str | None, str | None, str, str | None]:
    """Host, namespace, model and tag as Ollama's ParseNameBare cuts them (None when absent,
    "" when present but empty, which Ollama refuses)."""
    name = name.partition("@")[0]  # a digest pins a version; the label is the name
    host = namespace = tag = None
    if name.rfind(":") > name.rfind("/"):
        name, _, tag = name.rpartition(":")
    rest, slash, model = name.rpartition("/")
    if slash:
        host, slash, namespace = rest.rpartition("/")
        # Ollama drops a scheme before the host.
        host = (host.partition("://")[2] or host) if slash else None
    return host, namespace, model, tag


def canonical_model(name: str) -> str:
    """The name as /api/tags prints it: implied host, namespace and tag made explicit,
    the default host and namespace then left out ("llama3.2" → "llama3.2:latest",
    "registry.ollama.ai/library/llama3.2" → "llama3.2:latest", "hf.co/u/r:Q4_K_M" kept).

    The spelling is kept; compare with `model_key` for Ollama's case-insensitive matching.
    """
    host, namespace, model, tag = _split(name)
    host, namespace, tag = host or DEFAULT_HOST, namespace or DEFAULT_NAMESPACE, tag or DEFAULT_TAG
    if host.lower() != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.lower() != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def model_key(name: str) -> str:
    """The key under which Ollama treats two names as one model (canonical, case-folded)."""
    return canonical_model(name).lower()


def is_valid_name(name: str) -> bool:
    """Whether Ollama would accept the name; anything else (a prompt pasted into `model`,
    random bytes) can never name a model, so it never becomes a label of its own."""
    host, namespace, model, tag = _split(name)
    return (
        bool(_PART.fullmatch(model))
        and (tag is None or bool(_PART.fullmatch(tag)))
        and (namespace is None or bool(_PART.fullmatch(namespace)))
        and (host is None or bool(_HOST.fullmatch(host)))
    )


_CACHED_LENGTH: Final = 1024
"""Longer `model` values (a pasted prompt, say) are checked each time, never kept."""


@lru_cache(maxsize=1024)
def _valid_key(name: str) -> tuple[str, str] | None:
    # Every request asks this of its `model` (labels, logs, records); clients send the same
    # few names, so the regexes run once per name rather than several times per request.
    return (model_key(name), canonical_model(name)) if is_valid_name(name) else None


def valid_key(name: str) -> tuple[str, str] | None:
    """(model_key, canonical name) when Ollama would accept `name`, else None."""
    return _valid_key(name) if len(name) <= _CACHED_LENGTH else _valid_key.__wrapped__(name)


def recordable(name: str | None) -> str | None:
    """The name as logs and records keep it: canonical when Ollama would accept it, else
    `other` — a prompt pasted into `model` must not land in a log line or a metadata-mode
    record, which promise no text."""
    if not name:
        return None
    valid = valid_key(name)
    return OTHER if valid is None else valid[1]


class ModelLabels:
    """The bounded set of `model` label values.

    A name is *known* when the latest /api/tags or /api/ps read by the poller lists it
    (`set_known`); known names are unbounded by the cap because Ollama's own list bounds them.
    Any other valid name is admitted as an *extra* on first sight while fewer than `cap`
    extras exist, and keeps its label for the life of the process; beyond the cap it is
    `other`. Every unknown name asks for an /api/tags refresh through the poller's callback,
    at most once per `refresh_interval` seconds (the callback schedules the read and returns):
    a model pulled a moment ago thus becomes known, leaves the extras and frees its slot.
    Names Ollama would refuse are `other` at once; requests without a model get "".
    Matching is case-insensitive and prints the known spelling, as Ollama does.
    """

    def __init__(
        self,
        cap: int,
        *,
        refresh_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cap = cap
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._refresh: Callable[[], None] | None = None
        self._last_refresh = float("-inf")
        self._sources: dict[str, dict[str, str]] = {}
        self._known: dict[str, str] = {}
        self._extras: dict[str, str] = {}

    def set_refresher(self, refresh: Callable[[], None]) -> None:
        """Install the callback that schedules an /api/tags read (it must not block)."""
        self._refresh = refresh

    def set_known(self, source: str, names: Iterable[str]) -> None:
        """Replace the names one source ("tags", "ps") reports; the known set is their union."""
        self._sources[source] = {model_key(n): canonical_model(n) for n in names}
        self._known = {k: v for names_ in self._sources.values() for k, v in names_.items()}
        for key in self._known.keys() & self._extras.keys():
            del self._extras[key]

    def is_known(self, name: str) -> bool:
        return model_key(name) in self._known

    def label(self, name: object) -> str:
        """The label value for a request's `model` field (any JSON value)."""
        if not isinstance(name, str) or not name:
            return NO_MODEL
        valid = valid_key(name)
        if valid is None:
            return OTHER
        key, canonical = valid
        known = self._known.get(key) or self._extras.get(key)
        if known is not None:
            return known
        self._ask_refresh()
        if len(self._extras) >= self.cap:
            return OTHER
        self._extras[key] = canonical
        return canonical

    def _ask_refresh(self) -> None:
        now = self._clock()
        if self._refresh is None or now - self._last_refresh < self.refresh_interval:
            return
        self._last_refresh = now
        self._refresh()

"""Client names: which app sent each exchange, decided once from its request head, bounded."""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Final

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase
from ollama_tap.slots import IDLE_RELEASE, LabelSlots

NAME: Final = "client-names"
DEFAULT_HEADER: Final = "X-Ollama-Tap-Client"
UNKNOWN: Final = "unknown"
"""The name of an exchange no rule names: no header, no rule, no usable User-Agent."""
OTHER: Final = "other"
"""The label of every client beyond the cap; the name of a header value that is no word."""
MAX_NAME: Final = 64
"""A longer header value is cut to this many characters: names go into every log line."""
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a client name may be: a word, never free text (logs, records and labels carry it)."""
_RULES: Final = "rules"
"""The slots source of the names `--client` rules give (configured, so never capped)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Rule:
    """One `--client NAME=MATCH`: MATCH is a CIDR (the peer address) or `ua:GLOB`."""

    name: str
    network: Network | None
    ua_glob: str | None

    def matches(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, ua: str
    ) -> bool:
        if self.network is not None:
            return (
                address is not None
                and address.version == self.network.version
                and (address in self.network)
            )
        return self.ua_glob is not None and fnmatchcase(ua, self.ua_glob)


def parse_rule(text: str) -> Rule:
    """`NAME=CIDR` or `NAME=ua:GLOB`; ValueError naming the fix otherwise."""
    name, sep, match = text.strip().partition("=")
    name, match = name.strip(), match.strip()
    if not sep or not _NAME.fullmatch(name) or name.lower() in {UNKNOWN, OTHER}:
        raise ValueError(
            f"client rule {text!r} must be NAME=CIDR or NAME=ua:GLOB, NAME a word of letters, "
            "digits, '.', '_' or '-' other than 'unknown' and 'other' (e.g. webui=ua:*OpenWebUI*)"
        )
    if match.startswith("ua:"):
        if not match[3:]:
            raise ValueError(f"client rule {text!r}: give a glob after 'ua:', e.g. ua:*OpenWebUI*")
        return Rule(name, None, match[3:])
    try:
        return Rule(name, ipaddress.ip_network(match, strict=False), None)
    except ValueError:
        raise ValueError(
            f"client rule {text!r}: {match!r} is neither a CIDR (10.1.0.0/16) nor ua:GLOB"
        ) from None


_JOINED: Final = frozenset({"openai", "anthropic"})
"""SDKs whose first token has the language after the slash (`OpenAI/Python 1.54.0`)."""


@lru_cache(maxsize=512)
def product_of(user_agent: str) -> str | None:
    """The User-Agent's first product token, lower case, without its version:
    `ollama-python/0.6.3 (x86_64 linux)` → `ollama-python`, `OpenAI/Python 1.54.0` →
    `openai-python`, `curl/8.5.0` → `curl`; None when it holds no usable name."""
    first = user_agent.strip().split(None, 1)
    if not first:
        return None
    product, _, version = first[0].partition("/")
    product = product.lower()
    sdk = product.removeprefix("async")  # the SDKs' async clients: `AsyncOpenAI/Python …`
    if sdk in _JOINED and version and version[0].isalpha():
        product = f"{sdk}-{version.lower()}"
    return product if _NAME.fullmatch(product) else None


def _header(headers: Mapping[str, str], lower_names: tuple[str, str]) -> tuple[str, str]:
    """The values of two headers (by lower-case name) in one pass, "" when absent."""
    first = second = ""
    wanted, ua = lower_names
    for key, value in headers.items():
        low = key.lower()
        if low == wanted:
            first = value
        elif low == ua:
            second = value
    return first, second


@lru_cache(maxsize=1024)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


class ClientNames:
    """The observer that gives each exchange its client name and its `client` label.

    The first rule that matches names the client: the header the app sets on purpose
    (`header`: a word, cut to 64 characters; free text is `other`), the `--client` rules in
    order (a CIDR the peer address falls in, or a User-Agent glob), the User-Agent's first
    product token, else `unknown`. The name is decided at the `request` hook from the request
    head alone, once, so every series and the record of one exchange carry the same name.

    Two things are kept apart. The *name* (`Exchange.client_name`) is what the app said, in
    the spelling first seen: records, log lines, the in-flight view, load events and spans
    carry it whatever the cap, so `records ?client=w2` finds w2's records even after random
    names filled every slot. The *label* (`Exchange.client_label`) is the name bounded as
    model names are (`LabelSlots`): rule names always hold a slot, any other takes one of
    `cap` the first time it is seen, and beyond the cap the label is `other` until a slot
    has been idle for a day. Only the metric series are bounded; a name is at most 64
    characters of a word, so an unbounded set of names costs a bounded line each. The peer
    address stays in `Exchange.client`; names never replace it, and no name is ever built
    from a body or a query.
    """

    name = NAME
    phase = Phase.NAMES

    def __init__(
        self,
        cap: int,
        *,
        header: str = DEFAULT_HEADER,
        rules: Iterable[str] = (),
        idle: float = IDLE_RELEASE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = LabelSlots(cap, idle=idle, clock=clock)
        self.rules = tuple(parse_rule(r) for r in rules)
        self._header = (header.lower(), "user-agent")
        self.slots.list_names(_RULES, {r.name.lower(): r.name for r in self.rules})
        self._by_rule = lru_cache(maxsize=1024)(self._match_rules)
        self._clock = clock
        self._last_sweep = clock()

    def on_free(self, listener: Callable[[str], None]) -> None:
        """Call `listener(name)` when a name stops labelling anything (its series can go)."""
        self.slots.on_free(listener)

    def names_of(self, headers: Mapping[str, str], address: str) -> tuple[str, str]:
        """(name, label) of a request with these headers from this peer address."""
        value, ua = _header(headers, self._header)
        if value:
            value = value.strip()[:MAX_NAME]
            return self.bounded(value) if _NAME.fullmatch(value) else (OTHER, OTHER)
        named = self._by_rule(ua, address) if self.rules else None
        if named is not None:
            return named, named
        product = product_of(ua) if ua else None
        return (UNKNOWN, UNKNOWN) if product is None else self.bounded(product)

    def name_of(self, headers: Mapping[str, str], address: str) -> str:
        """The name of a request with these headers from this peer address (never bounded)."""
        return self.names_of(headers, address)[0]

    def bounded(self, name: str) -> tuple[str, str]:
        """(name, label): a name holding a slot is its slot spelling for both (so one app
        reads the same whatever its case); beyond the cap, the name as given and `other`."""
        # Every sighting is a proof: it keeps a name in use from being freed as idle.
        self._sweep()
        spelled = self.slots.prove(name.lower(), name)
        return (spelled, spelled) if spelled else (name, OTHER)

    def request(self, ex: Exchange) -> None:
        """The observer hook: the exchange's name and label, from its head, before any
        other looks."""
        ex.client_name, ex.client_label = self.names_of(ex.request_headers, ex.client)

    def _match_rules(self, ua: str, address: str) -> str | None:
        peer = _address(address) if address else None
        return next((r.name for r in self.rules if r.matches(peer, ua)), None)

    def _sweep(self) -> None:
        # No poller lists clients (whose `list_names` would sweep): idle names are freed
        # here, at most once a minute.
        now = self._clock()
        if now - self._last_sweep >= 60.0:
            self._last_sweep = now
            self.slots.sweep()

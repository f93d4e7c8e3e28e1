"""One Ollama box behind the tap: its poller, its load tracker, its truncation rules, and how
many of the tap's requests are on it now."""

from __future__ import annotations

from typing import Any, Final

from yarl import URL

from ollama_tap.boxes.spec import BoxSpec
from ollama_tap.loads.tracker import LoadTracker
from ollama_tap.truncation.observer import TruncationObserver
from ollama_tap.upstream import UpstreamPoller

UPSTREAM_HEADER: Final = "X-Ollama-Tap-Upstream"
"""The request header that names the box a request is for (management routes need it)."""


class Box:
    """A box's own view of Ollama: each box is polled, and its loads and truncation context
    judged, as if it were the only one (so a box's load history is its own)."""

    def __init__(
        self,
        spec: BoxSpec,
        index: int,
        poller: UpstreamPoller,
        loads: LoadTracker,
        truncation: TruncationObserver,
    ) -> None:
        self.name: str = spec.name
        self.url: URL = spec.url
        self.index = index
        """Its place in the configuration: the last tie-break."""
        self.poller = poller
        self.loads = loads
        self.truncation = truncation
        self.in_flight = 0
        """The tap's exchanges on this box, from routing to their end (the router's count)."""
        self.flight: dict[str, int] = {}
        """Those by model key ("" for none)."""
        self.served: dict[str, dict[str, Any]] = {}
        """Models that replied here since the last /api/ps read, by model key, with the
        runner options of the last such request: resident now, whatever the load tracker
        knows (it learns of a load under a second from the next read only)."""
        poller.on_ps(lambda _: self.served.clear())

    @property
    def down(self) -> bool:
        """Whether its last /api/version read failed (unknown before the first: not down)."""
        return self.poller.known_down

    def __repr__(self) -> str:
        return f"Box({self.name!r}, {str(self.url)!r})"

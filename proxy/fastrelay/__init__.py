"""The `fast` relay (setting `relay = "fast"`): upstream replies parsed and relayed from the
socket callback itself, with no task switch, future or awaited write per chunk."""

from __future__ import annotations

from proxy.fastrelay.pool import UpstreamPool
from proxy.fastrelay.relay import FastRelay

__all__ = ["FastRelay", "UpstreamPool"]

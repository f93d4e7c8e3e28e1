"""OpenTelemetry fixtures: the test receiver, and proxies that export to it quickly."""

from __future__ import annotations

import os

import pytest
import pytest_asyncio
from pytest_aiohttp import AiohttpServer

from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver


@pytest.fixture(autouse=True)
def _quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch processor exports every 50 ms (5 s by default), and nothing of the
    developer's OTEL_* environment leaks in."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")


@pytest_asyncio.fixture
async def receiver(aiohttp_server: AiohttpServer) -> Receiver:
    rec = Receiver()
    server = await aiohttp_server(rec.app())
    rec.url = str(server.make_url("")).rstrip("/")
    return rec


@pytest_asyncio.fixture
async def traced(proxy_factory: MakeProxy, receiver: Receiver) -> Proxy:
    """A proxy exporting to the receiver, in the recorder's `full` mode (a loopback bind)."""
    return await proxy_factory(otlp_endpoint=receiver.url)

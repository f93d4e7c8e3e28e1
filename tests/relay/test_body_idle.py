"""A request body that stops coming is cut by the HTTP/1 front after STALL_SECONDS seconds
without a byte, logged and counted; one that keeps coming, however slowly, is not."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ollama_tap import relay
from ollama_tap.exchange import Outcome
from ollama_tap.relay.http1 import request
from tests.conftest import MakeProxy
from tests.support.spy import Spy
from tests.support.waiting import eventually

HEAD = (
    b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n"
)
BODY = b'{"model": "llama3.2", "prompt": "hi", "stream": false}'


@pytest.mark.interpreted
async def test_a_stalled_body_is_cut_logged_and_counted(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """119 uploads that stopped after a few bytes held two sockets each for good, and left
    no room for new clients; nothing was logged."""
    monkeypatch.setattr(request, "STALL_SECONDS", 1.0)
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    with capture_logs() as lines:
        writer.write(HEAD % 1_000_000 + b'{"model": "llama3.2",')
        assert await asyncio.wait_for(reader.read(), 20) == b""
        [ended] = await ends.wait_ended()
    assert ended.outcome is Outcome.CLIENT_DISCONNECTED
    assert [line["event"] for line in lines].count("front_body_timeout") == 1
    assert proxy.sample("ollama_tap_client_body_timeouts_total") == 1
    writer.close()


@pytest.mark.interpreted
async def test_a_slow_body_that_keeps_coming_is_relayed(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(request, "STALL_SECONDS", 1.0)
    proxy = await proxy_factory()
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(HEAD % len(BODY))
    for i in range(0, len(BODY), 8):  # about 3.5 s in all, never 1 s without a byte
        writer.write(BODY[i : i + 8])
        await asyncio.sleep(0.5)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
    assert head.startswith(b"HTTP/1.1 200")
    assert proxy.sample("ollama_tap_client_body_timeouts_total") == 0
    writer.close()


@pytest.mark.interpreted
async def test_a_body_sent_to_the_proxys_own_path_is_cut_logged_and_counted_too(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's server answers the proxy's own paths and reads no body: it takes the rest
    of one for OWN_BODY_SECONDS after its answer, then cuts the connection, counted as the
    front's stalled bodies are. A whole body is not counted."""
    monkeypatch.setattr(relay, "OWN_BODY_SECONDS", 1.0)
    proxy = await proxy_factory()
    head = b"POST /_tap/api/records HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n"
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(head % 2 + b"{}")
    assert (await asyncio.wait_for(reader.read(), 20)).startswith(b"HTTP/1.1 401")
    writer.close()
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    with capture_logs() as lines:
        writer.write(head % 1_000_000 + b'{"a": ')
        assert (await asyncio.wait_for(reader.read(), 20)).startswith(b"HTTP/1.1 401")
        await eventually(lambda: proxy.sample("ollama_tap_client_body_timeouts_total") == 1)
    [said] = [line for line in lines if line["event"] == "front_body_timeout"]
    assert said["path"] == "/_tap/api/records"
    await asyncio.sleep(1.5)  # the whole body's check is past too
    assert proxy.sample("ollama_tap_client_body_timeouts_total") == 1
    writer.close()

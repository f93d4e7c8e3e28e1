"""A collector that hangs or refuses costs the proxy nothing but spans, and those are counted."""

from __future__ import annotations

import socket

import ollama
import pytest

from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, MESSAGES, settled, took
from tests.support.spy import Spy
from tests.support.waiting import eventually

TOKEN = 0.02
EXCHANGES = 6


def dropped(proxy: Proxy) -> float:
    return proxy.sample("ollama_tap_otel_spans_dropped_total") or 0.0


async def streams_at_full_speed(proxy: Proxy, spy: Spy, fake_ollama: FakeOllama) -> None:
    """Stream EXCHANGES chats one after another while the export is stuck or failing: each
    is relayed as fast as the fake produced it (its duration at the proxy, head to last
    byte written, within TOL of the fake's own total), as the metrics tests hold it."""
    fake_ollama.script = Script(token_delay=TOKEN)
    client = ollama.AsyncClient(host=proxy.url)
    finals = []
    for _ in range(EXCHANGES):
        parts = [p async for p in await client.chat(LLAMA, messages=MESSAGES, stream=True)]
        finals.append(parts[-1])
    await settled(proxy)
    ended = await spy.wait_ended(EXCHANGES)
    for ex, final in zip(ended, finals, strict=True):
        assert took(ex.duration, final.total_duration, 4 * TOKEN), (ex.duration, final)


async def test_a_hanging_collector_does_not_slow_streams_and_the_full_queue_drops(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")
    receiver.hang = True
    spy = Spy()
    proxy = await proxy_factory(otlp_endpoint=receiver.url, observers=(spy,))
    try:
        await streams_at_full_speed(proxy, spy, fake_ollama)
        # The first batch hangs in the exporter, the queue holds two more: the rest drop.
        spans = 2 * EXCHANGES
        await eventually(lambda: dropped(proxy) >= spans - 2 * 2 - 1)
        assert dropped(proxy) <= spans - 2
    finally:
        receiver.released.set()


async def test_a_refusing_collector_does_not_slow_streams_and_failed_exports_count(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    spy = Spy()
    proxy = await proxy_factory(otlp_endpoint=f"http://127.0.0.1:{port}", observers=(spy,))
    await streams_at_full_speed(proxy, spy, fake_ollama)
    await eventually(lambda: dropped(proxy) == 2 * EXCHANGES, within=20)

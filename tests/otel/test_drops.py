"""A collector that hangs, refuses or takes only small requests costs the proxy nothing but
spans, in bounded memory, and every lost span is counted by reason and logged."""

from __future__ import annotations

import asyncio
import socket
from typing import cast

import ollama
import pytest
from structlog.testing import capture_logs

from ollama_tap.app import OTEL
from ollama_tap.otel import export
from ollama_tap.otel.emit import SPAN_OVERHEAD
from ollama_tap.otel.export import Gate, Queue
from ollama_tap.otel.observer import OtelObserver
from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, MESSAGES, settled
from tests.support.spy import Spy
from tests.support.waiting import eventually

EXCHANGES = 6


def dropped(proxy: Proxy, reason: str, signal: str = "spans") -> float:
    labels = {"signal": signal, "reason": reason}
    return proxy.sample("ollama_tap_otel_dropped_total", labels) or 0.0


def queue_of(proxy: Proxy) -> Queue:
    observer = cast(OtelObserver, proxy.app[OTEL].observers[0])
    return cast(Gate, observer.emitter.processors[0]).queue


async def stream_chats(proxy: Proxy, spy: Spy, count: int = EXCHANGES) -> None:
    """`count` streamed chats one after another, each relayed to its last chunk."""
    client = ollama.AsyncClient(host=proxy.url)
    for _ in range(count):
        parts = [p async for p in await client.chat(LLAMA, messages=MESSAGES, stream=True)]
        assert parts[-1].done
    await settled(proxy)
    await spy.wait_ended(count)


async def test_a_hanging_collector_holds_no_stream_and_the_full_queue_drops(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every stream ends while the collector still holds the first export: the relay never
    waits for the export (shown by order, not by a time, which a loaded machine stretches)."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60")
    receiver.hang = True
    fake_ollama.script = Script(token_delay=0.02)
    spy = Spy()
    proxy = await proxy_factory(otlp_endpoint=receiver.url, observers=(spy,))
    try:
        await stream_chats(proxy, spy, 1)
        await eventually(lambda: receiver.held == 1, within=30)
        await stream_chats(proxy, spy, EXCHANGES - 1)
        assert receiver.held == 1 and not receiver.spans
        # The bound counts the spans in the export at hand too: those two, and no more.
        assert dropped(proxy, "queue_full") == 2 * EXCHANGES - 2
        assert queue_of(proxy).depth == 2
    finally:
        receiver.released.set()
    await eventually(lambda: len(receiver.spans) == 2, within=30)
    assert queue_of(proxy).depth == queue_of(proxy).bytes == 0


async def test_a_refusing_collector_counts_every_failed_export(
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
    with capture_logs() as lines:
        await stream_chats(proxy, spy)
        await eventually(lambda: dropped(proxy, "export_failed") == 2 * EXCHANGES, within=60)
    said = [line for line in lines if line["event"] == "otel_dropped"]
    # Logged at the first loss, then at most once a minute: the counter has the rest.
    assert said[0]["signal"] == "spans" and said[0]["reason"] == "export_failed"
    assert len(said) == 1
    assert dropped(proxy, "queue_full") == dropped(proxy, "too_large") == 0


async def test_big_prompts_to_a_hanging_collector_stay_within_the_queue_bytes(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The review's load, scaled: 1 MB prompts in `full` mode while the collector never
    answers. The spans held for export stay under the byte bound; the rest are counted."""
    bound = 600_000
    monkeypatch.setattr(export, "QUEUE_BYTES", bound)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60")
    receiver.hang = True
    fake_ollama.script = Script(tokens=["ok"])
    spy = Spy()
    proxy = await proxy_factory(otlp_endpoint=receiver.url, observers=(spy,))
    queue = queue_of(proxy)
    assert queue.max_bytes == bound
    client = ollama.AsyncClient(host=proxy.url)
    prompt = "y" * 1_000_000
    try:
        for _ in range(3):
            await asyncio.gather(*(client.generate(LLAMA, prompt) for _ in range(4)))
        await spy.wait_ended(12)
        assert queue.bytes <= bound
        # Each SERVER span holds 64 Ki characters of prompt: a few fit, most drop.
        assert 0 < queue.depth < 2 * 12
        assert dropped(proxy, "queue_full") == 2 * 12 - queue.depth
    finally:
        receiver.released.set()


async def test_a_batch_too_large_for_the_collector_loses_only_the_span_it_refuses(
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three large prompts among twenty small requests, one batch: the collector refuses
    every request over its limit (413). The batch is split down to the three spans it cannot
    take; every other span arrives."""
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "300000")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "2000")  # one batch for them all
    receiver.limit = 200_000
    fake_ollama.script = Script(tokens=["ok"])
    spy = Spy()
    proxy = await proxy_factory(otlp_endpoint=receiver.url, observers=(spy,))
    client = ollama.AsyncClient(host=proxy.url)
    large = [client.generate(LLAMA, "z" * 250_000) for _ in range(3)]
    small = [client.generate(LLAMA, "hi") for _ in range(20)]
    await asyncio.gather(*large, *small)
    await spy.wait_ended(23)
    await eventually(lambda: len(receiver.spans) + dropped(proxy, "too_large") == 46, within=30)
    assert dropped(proxy, "too_large") == 3
    assert len(receiver.servers) == 20 and len(receiver.clients) == 23
    assert dropped(proxy, "export_failed") == 0


def test_a_batch_is_sent_in_requests_of_bounded_bytes() -> None:
    sizes = [100, 100, 100, 500, 30, 30]

    class Sized:
        def __init__(self, size: int) -> None:
            self.size = size

    spans = [Sized(SPAN_OVERHEAD + n) for n in sizes]
    cut = export.batches(spans, 2 * SPAN_OVERHEAD + 250)  # type: ignore[arg-type]
    assert [[s.size - SPAN_OVERHEAD for s in run] for run in cut] == [  # type: ignore[attr-defined]
        [100, 100], [100], [500], [30, 30],
    ]  # fmt: skip

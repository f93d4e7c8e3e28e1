"""Through the proxy in front of the fake: each record carries the Ollama version the poller
last read, a version change is logged, and `records show` names the version."""

from __future__ import annotations

import asyncio

import ollama
import pytest
from structlog.testing import capture_logs

from ollama_tap.cli import main
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import records
from tests.support.waiting import eventually


async def _chat(proxy: Proxy) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    await client.chat("llama3.2", messages=[{"role": "user", "content": "hi"}])


async def test_records_carry_the_version_that_served_them(
    proxy: Proxy, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    old = fake_ollama.version
    await eventually(lambda: proxy.sample("ollama_tap_upstream_info", {"version": old}) == 1)
    await _chat(proxy)
    [first] = await records(proxy, 1)
    assert first["ollama_version"] == old

    with capture_logs() as logs:
        fake_ollama.version = "0.34.0"
        await eventually(
            lambda: proxy.sample("ollama_tap_upstream_info", {"version": "0.34.0"}) == 1
        )
    changed = [e for e in logs if e["event"] == "upstream_version_changed"]
    assert [(e["old"], e["new"]) for e in changed] == [(old, "0.34.0")]
    assert proxy.sample("ollama_tap_upstream_info", {"version": old}) is None

    await _chat(proxy)
    newest, oldest = await records(proxy, 2)
    assert (oldest["ollama_version"], newest["ollama_version"]) == (old, "0.34.0")
    # The command runs its own event loop: off this one, as from a shell.
    show = ["records", "show", newest["id"], "--db", str(proxy.settings.db_path)]
    assert await asyncio.to_thread(main, show) == 0
    assert "Ollama: 0.34.0" in capsys.readouterr().out

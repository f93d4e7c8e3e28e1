"""Through the proxy in front of the fake: traffic recorded under one version, then under a
"new version" that decodes 20 % slower for one model and as fast for another.

The fake reports the phases it measures on its own clock. Here that clock gains `step` at
each of its reads, so every phase lasts a set number of steps more than the (tiny) real
time it took: the decode phase of a 5-token reply spans 4 reads, so its rate is set by the
step, whatever the load on the machine (the real part is a few milliseconds in 400).
Prefill sleeps 250 ms for real, so that TTFT, measured by the proxy on the real clock, is as
long as a real one and its few milliseconds of jitter stay far under the 10 % threshold.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ollama
import orjson
import pytest

from ollama_tap.cli import main
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama, engine, native
from tests.support.records import records
from tests.support.waiting import eventually

OLD, NEW = "0.12.3", "0.13.0"
STEP = 100_000_000
"""100 ms a read: 5 tokens over 4 reads decode at 12.5 tokens/s."""
PER_SIDE = 20


class SteppedClock:
    """The `time` module as the fake reads it, with `step` ns more at each monotonic read."""

    def __init__(self) -> None:
        self.step = STEP
        self.extra = 0

    def monotonic_ns(self) -> int:
        self.extra += self.step
        return time.monotonic_ns() + self.extra

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SteppedClock:
    stepped = SteppedClock()
    monkeypatch.setattr(engine, "time", stepped)
    monkeypatch.setattr(native, "time", stepped)
    return stepped


async def _serve(proxy: Proxy, fake: FakeOllama, version: str) -> None:
    fake.version = version
    await eventually(lambda: proxy.sample("ollama_tap_upstream_info", {"version": version}) == 1)


async def _chats(proxy: Proxy, model: str) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    for i in range(PER_SIDE):
        stream = await client.chat(
            model, messages=[{"role": "user", "content": f"q{i}"}], stream=True
        )
        async for _ in stream:
            pass


async def _upgrade(proxy: Proxy, fake: FakeOllama, clock: SteppedClock, slower: float) -> int:
    """Both models under OLD, then under NEW with llama3.2's steps `slower` times longer;
    upgrade-check's exit code."""
    fake.script.prefill_delay = 0.25
    await _serve(proxy, fake, OLD)
    for model in ("llama3.2", "qwen3:8b"):
        await _chats(proxy, model)
    await _serve(proxy, fake, NEW)
    clock.step = round(STEP * slower)
    await _chats(proxy, "llama3.2")
    clock.step = STEP
    await _chats(proxy, "qwen3:8b")
    await records(proxy, 4 * PER_SIDE, limit="200")
    db = str(proxy.settings.db_path)
    code = await asyncio.to_thread(main, ["upgrade-check", "--db", db, "--json"])
    return code


def _document(out: str) -> Any:
    # The proxy in this process logs to stdout too: its lines start with the date.
    return orjson.loads("\n".join(line for line in out.splitlines() if not line.startswith("20")))


async def test_a_new_version_20_percent_slower_for_one_model_exits_1(
    proxy: Proxy, fake_ollama: FakeOllama, clock: SteppedClock, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await _upgrade(proxy, fake_ollama, clock, 1.25)
    doc = _document(capsys.readouterr().out)
    assert code == 1
    assert (doc["before"]["version"], doc["after"]["version"]) == (OLD, NEW)
    models = {m["model"]: m for m in doc["models"]}
    slow, same = models["llama3.2:latest"], models["qwen3:8b"]
    decode = next(r for r in slow["rows"] if r["figure"] == "decode_rate")
    assert (decode["before"]["n"], decode["after"]["n"]) == (PER_SIDE, PER_SIDE)
    assert decode["ratio"] == pytest.approx(0.8, abs=0.03)
    assert slow["verdict"] == "slower" and decode["change"] == "slower"
    assert same["verdict"] == "same"
    assert next(r for r in same["rows"] if r["figure"] == "decode_rate")["change"] == "same"
    # The model that decodes as fast, alone: unchanged, exit 0.
    code = await asyncio.to_thread(
        main, ["upgrade-check", "--db", str(proxy.settings.db_path), "--model", "qwen3:8b"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "qwen3:8b: same" in out

"""`ollama-tap serve` in front of `replay serve`: metrics, poller state and records fill."""

from __future__ import annotations

from pathlib import Path

import ollama

from tests.conftest import MakeProxy
from tests.replay.conftest import StartReplay
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.script import Script
from tests.support.metrics import LLAMA, MESSAGES, samples, settled
from tests.support.records import records
from tests.support.waiting import eventually


async def test_the_dashboard_fills_from_a_replay(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, replay_of: StartReplay, tmp_path: Path
) -> None:
    fake_ollama.script = Script(prefill_delay=0.02, token_delay=0.005)
    recording = await proxy_factory()
    client = ollama.AsyncClient(host=recording.url)
    async for _ in await client.chat("llama3.2", messages=MESSAGES, stream=True):
        pass
    await client.generate("llama3.2", "Why is the sky blue?")
    replay = await replay_of(recording, 2, paced=False)

    front = await proxy_factory(upstream=replay.url, db=tmp_path / "front.db")
    again = ollama.AsyncClient(host=front.url)
    parts = [p async for p in await again.chat("llama3.2", messages=MESSAGES, stream=True)]
    assert "".join(p.message.content or "" for p in parts) == "The sky is blue."
    assert (await again.generate("llama3.2", "Why is the sky blue?")).done_reason == "stop"
    await settled(front)

    assert front.sample("ollama_tap_upstream_up") == 1
    await eventually(lambda: front.sample("ollama_tap_model_loaded", {"model": LLAMA}) == 1)
    [(labels, ttft)] = samples(front, "ollama_tap_time_to_first_token_seconds_count")
    assert (labels["endpoint"], labels["model"], ttft) == ("/api/chat", LLAMA, 1)
    decode = [v for _, v in samples(front, "ollama_tap_decode_tokens_per_second_count")]
    assert sum(decode) == 2, decode
    listed = await records(front, 2)
    assert {(r["endpoint"], r["outcome"], r["model"]) for r in listed} == {
        ("/api/chat", "ok", LLAMA),
        ("/api/generate", "ok", LLAMA),
    }

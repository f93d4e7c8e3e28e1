"""What a real Ollama's final object says against what the proxy makes of it: the metrics and
the record carry the same durations and counts; a recorded `context` decodes to the prompt
and the reply; the official `ollama` client works through the proxy unchanged."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any, Final

import ollama
import pytest

from tests.conftest import Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, GREEDY, MODEL, Ollama, call
from tests.ollama_real.provision import CURRENT, OLLAMA
from tests.support.metrics import hist, settled
from tests.support.records import records
from tests.support.serve_process import ADMIN_TOKEN

NS = 1e9
ENDPOINTS: Final = ("/api/generate", "/api/chat")


def _phases(final: dict[str, Any]) -> dict[str, float]:
    return {
        "load": final["load_duration"] / NS,
        "prefill": final["prompt_eval_duration"] / NS,
        "decode": final["eval_duration"] / NS,
        "total": final["total_duration"] / NS,
    }


MEASURED: Final = [
    *((OLLAMA, endpoint, stream) for endpoint in ENDPOINTS for stream in (False, True)),
    (CURRENT, "/api/generate", True),
    (CURRENT, "/api/chat", False),
]
"""Every endpoint and mode on v0.24.0; on v0.30.0 (llama-server's timings, converted from
milliseconds by Ollama) one of each endpoint, to keep its part of the tier short."""


@pytest.mark.parametrize(("real_ollama", "endpoint", "stream"), MEASURED, indirect=["real_ollama"])
async def test_the_final_object_is_what_the_metrics_and_the_record_say(
    tapped: Proxy, real_ollama: Ollama, endpoint: str, stream: bool
) -> None:
    await real_ollama.unload_all()  # a real load, so load_duration is not ~0
    body: dict[str, Any] = {"model": MODEL, "options": GREEDY, "stream": stream}
    if endpoint == "/api/generate":
        body["prompt"] = "Write a sentence about the sea."
    else:
        body["messages"] = [{"role": "user", "content": "Write a sentence about the sea."}]
    reply = await call(tapped.url, "POST", endpoint, body, {"X-Ollama-Tap-Client": "tier"})
    assert reply.status == 200, reply.body
    final = reply.lines()[-1] if stream else reply.json()
    assert final["done"] is True
    await settled(tapped)
    labels = {"endpoint": endpoint, "model": MODEL, "stream": str(stream).lower()}
    for family, field in (
        ("load_duration_seconds", "load_duration"),
        ("prompt_eval_duration_seconds", "prompt_eval_duration"),
        ("eval_duration_seconds", "eval_duration"),
    ):
        count, seconds = hist(tapped, family, **labels)
        assert (count, seconds) == (1, pytest.approx(final[field] / NS, abs=1e-9)), family
    tokens = {"endpoint": endpoint, "model": MODEL, "client": "tier", "location": "local"}
    assert tapped.sample("ollama_tap_prompt_tokens_total", tokens) == final["prompt_eval_count"]
    assert tapped.sample("ollama_tap_generation_tokens_total", tokens) == final["eval_count"]
    [record] = await records(tapped, 1)
    assert (record["prompt_tokens"], record["eval_tokens"]) == (
        final["prompt_eval_count"],
        final["eval_count"],
    )
    for phase, seconds in _phases(final).items():
        assert record[phase] == pytest.approx(seconds, abs=1e-9), phase
    assert record["queue_wait"] == pytest.approx(
        _phases(final)["total"] - sum(_phases(final)[p] for p in ("load", "prefill", "decode")),
        abs=1e-9,
    )
    assert record["client_name"] == "tier" and record["done_reason"] == final["done_reason"]


@BOTH_RELEASES
async def test_a_recorded_context_decodes_to_the_prompt_and_the_reply(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """`ollama-tap decode --record` takes the vocabulary from the model's real blob (found
    through /api/show and the store) and the ids from the record."""
    prompt = "Complete this: the quick brown fox"
    body = {"model": MODEL, "prompt": prompt, "options": GREEDY, "stream": False}
    reply = (await call(tapped.url, "POST", "/api/generate", body)).json()
    assert reply["context"], "Ollama 0.24 returns the context of a /api/generate reply"
    [record] = await records(tapped, 1)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable, "-m", "ollama_tap", "decode", "--record", record["id"],
            "--db", str(tapped.settings.db), "--url", real_ollama.url,
            "--store", real_ollama.env["OLLAMA_MODELS"],
        ],
        capture_output=True, text=True, timeout=120, check=False,
        env={**real_ollama.env, "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert prompt in done.stdout and reply["response"].strip() in done.stdout


@BOTH_RELEASES
async def test_the_official_ollama_client_through_the_proxy(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    client = ollama.AsyncClient(host=tapped.url)
    direct = ollama.AsyncClient(host=real_ollama.url)
    listed = await client.list()
    assert [m.model for m in listed.models] == [m.model for m in (await direct.list()).models]
    shown = await client.show(MODEL)
    assert shown.modelfile == (await direct.show(MODEL)).modelfile
    messages = [{"role": "user", "content": "Say hello."}]
    chunks = [c async for c in await client.chat(MODEL, messages, stream=True, options=GREEDY)]
    straight = [c async for c in await direct.chat(MODEL, messages, stream=True, options=GREEDY)]
    assert [c.message.content for c in chunks] == [c.message.content for c in straight]
    assert chunks[-1].eval_count == straight[-1].eval_count and chunks[-1].done
    generated = await client.generate(MODEL, "One, two,", options=GREEDY)
    assert (
        generated.response == (await direct.generate(MODEL, "One, two,", options=GREEDY)).response
    )
    running = await client.ps()
    assert MODEL in [m.model for m in running.models]

"""Cloud exchanges (C1–C4) through the real proxy: counted with location="cloud", kept out
of every local figure, their client-side times still measured."""

from __future__ import annotations

import ollama
import pytest

from ollama_tap.cloud import is_cloud_model, is_remote_stub
from ollama_tap.metrics import families
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, counter, hist, samples, settled

CLOUD = "gpt-oss:120b-cloud"
LOCAL_FIGURES = [
    families.LOAD, families.QUEUE_WAIT, families.PROMPT_EVAL, families.EVAL,
    families.DECODE_RATE, families.PREFILL_RATE, families.DECODE_TOKENS, families.DECODE_SECONDS,
    families.PREFILL_TOKENS, families.PREFILL_SECONDS, families.CONTEXT_TOKENS,
    families.UTILIZATION, families.COLD_STARTS, families.TRUNCATIONS,
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cloud"),
    [
        ("gpt-oss:120b-cloud", True),
        ("kimi-k2.5:cloud", True),
        ("kimi-k2.5:CLOUD", True),
        ("foo-cloud", False),  # no tag: local
        ("gpt-oss:120b-cloud:local", False),
        ("hf.co/u/r-cloud:q4", False),
        ("llama3.2", False),
        (None, False),
    ],
)
def test_cloud_names_as_ollama_parses_them(name: str | None, cloud: bool) -> None:
    assert is_cloud_model(name) is cloud


def test_remote_stubs_are_told_by_their_reply_fields() -> None:
    assert is_remote_stub({"model": "x", "remote_model": "y", "remote_host": "ollama.com"})
    assert not is_remote_stub({"model": "x"}) and not is_remote_stub(None)


def local_figures(proxy: Proxy) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the families that describe the local runner."""
    names = [f.name for f in LOCAL_FIGURES]
    suffixes = ("", "_total", "_count", "_sum", "_bucket")
    return {n + s: samples(proxy, n + s) for n in names for s in suffixes}


async def test_a_cloud_request_leaves_the_local_figures_unchanged(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    fake_ollama.context_rules = True
    fake_ollama.script = Script(prompt_eval_cached_count=2, eval_count=9000)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate(LLAMA, "Why is the sky blue?", options={"num_ctx": 4096})
    await settled(proxy)
    before = local_figures(proxy)
    assert before["ollama_tap_decode_tokens_total"], "the local request filled the rate pair"
    # A prompt and output past any local context: it must not be judged against the box's.
    stream = await client.chat(
        CLOUD, [{"role": "user", "content": " ".join(["w"] * 5000)}], stream=True
    )
    parts = [part async for part in stream]
    assert parts[-1].done
    await settled(proxy)
    assert local_figures(proxy) == before
    cloud = {"endpoint": "/api/chat", "model": CLOUD}
    assert counter(proxy, "requests_total", **cloud, location="cloud") == 1
    assert counter(proxy, "requests_total", **cloud, location="local") is None
    assert counter(proxy, "generation_tokens_total", **cloud, location="cloud") == 9000
    assert hist(proxy, "time_to_first_token_seconds", **cloud)[0] == 1
    assert hist(proxy, "request_duration_seconds", **cloud, stream="true")[0] == 1
    local = {"endpoint": "/api/generate", "model": LLAMA, "location": "local"}
    assert counter(proxy, "requests_total", **local) == 1
    assert CLOUD not in {m.name for m in fake_ollama.listed()}
    assert not fake_ollama.loaded.keys() - {LLAMA}, "a cloud model never runs locally"

"""Content on spans follows the recorder's privacy mode; credentials never reach a span."""

from __future__ import annotations

import json

import ollama
import pytest

from tests.conftest import MakeProxy
from tests.otel.receiver import Receiver, spans_of
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA

PROMPT = "PROMPT-SECRET why is the sky blue"
SYSTEM = "SYSTEM-SECRET be brief"
TOKENS = ["OUTPUT", "-SECRET", " it", " scatters"]
CREDENTIALS = ("Bearer HEADER-SECRET", "QUERY-SECRET")


async def _chat(proxy_url: str, stream: bool) -> None:
    client = ollama.AsyncClient(
        host=f"{proxy_url}", headers={"Authorization": CREDENTIALS[0], "X-Api-Key": "XKEY-SECRET"}
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    if stream:
        async for _ in await client.chat(LLAMA, messages=messages, stream=True):
            pass
    else:
        await client.chat(LLAMA, messages=messages, stream=False)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "single"])
async def test_full_mode_puts_prompt_and_output_on_the_span_and_no_credential(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, receiver: Receiver, stream: bool
) -> None:
    fake_ollama.script = Script(tokens=TOKENS)
    proxy = await proxy_factory(otlp_endpoint=receiver.url, record="full")
    await _chat(proxy.url, stream)
    await spans_of(receiver, 1)
    a = receiver.servers[0].attrs
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]},
    ]
    [output] = json.loads(a["gen_ai.output.messages"])
    assert output["role"] == "assistant" and output["finish_reason"] == "stop"
    assert output["parts"] == [{"type": "text", "content": "".join(TOKENS)}]
    raw = b"".join(receiver.raw)
    for secret in (*CREDENTIALS, "HEADER-SECRET", "XKEY-SECRET"):
        assert secret.encode() not in raw


@pytest.mark.parametrize("mode", ["metadata", "off"])
async def test_metadata_and_off_modes_export_no_content_at_all(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, receiver: Receiver, mode: str
) -> None:
    fake_ollama.script = Script(tokens=TOKENS)
    proxy = await proxy_factory(otlp_endpoint=receiver.url, record=mode)
    await _chat(proxy.url, stream=True)
    await _chat(proxy.url, stream=False)
    await spans_of(receiver, 2)
    raw = b"".join(receiver.raw)
    assert b"chat " + LLAMA.encode() in raw  # the spans are there, by their names
    for secret in ("PROMPT-SECRET", "SYSTEM-SECRET", "OUTPUT", "scatters", "HEADER-SECRET"):
        assert secret.encode() not in raw, secret
    assert (
        not {"gen_ai.input.messages", "gen_ai.output.messages"} & receiver.servers[0].attrs.keys()
    )

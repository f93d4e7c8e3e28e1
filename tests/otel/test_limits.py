"""The span limits: every string attribute cut at OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT (the
SDK's SpanLimits read it), 64 Ki characters when unset; span names at 256."""

from __future__ import annotations

import ollama
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ollama_tap.config import ConfigError
from ollama_tap.otel.emit import NAME_LENGTH, Emitter, SpanIds
from ollama_tap.otel.export import DEFAULT_VALUE_LENGTH, value_length
from tests.conftest import MakeProxy
from tests.otel.receiver import Receiver
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA
from tests.support.waiting import eventually


def test_the_limit_is_the_sdks_with_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert value_length() == DEFAULT_VALUE_LENGTH
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "300")
    assert value_length() == 300
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "200")  # the span's own wins
    assert value_length() == 200
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "many")
    with pytest.raises(ConfigError, match="OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        value_length()


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def test_the_emitter_cuts_strings_and_names_and_nothing_else() -> None:
    collect = Collect()
    scope = InstrumentationScope("ollama-tap", "1")
    emitter = Emitter(Resource({}), scope, DEFAULT_ON, [collect], 10)
    server = {"text": "x" * 11, "short": "y" * 10, "reasons": ("z" * 20, "stop"), "n": 10**12}
    client = {"gen_ai.request.model": "m" * 11}
    emitter.emit("chat " + "m" * 1000, SpanIds(None), None, (1, 2), server, client, [], None)
    made = {span.kind.name: span for span in collect.spans}
    assert dict(made["SERVER"].attributes or {}) == {
        "text": "x" * 10, "short": "y" * 10, "reasons": ("z" * 10, "stop"), "n": 10**12,
    }  # fmt: skip
    assert dict(made["CLIENT"].attributes or {}) == {"gen_ai.request.model": "m" * 10}
    assert {span.name for span in collect.spans} == {("chat " + "m" * 1000)[:NAME_LENGTH]}


async def test_a_long_prompt_and_model_reach_the_collector_cut(
    proxy_factory: MakeProxy,
    receiver: Receiver,
    fake_ollama: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "500")
    proxy = await proxy_factory(otlp_endpoint=receiver.url)
    fake_ollama.script = Script(tokens=["a"] * 3)
    prompt = "why " * 10_000
    await ollama.AsyncClient(host=proxy.url).generate(LLAMA, prompt)
    model = "x" * 5_000  # no name Ollama takes: a 404, with its spans all the same
    with pytest.raises(ollama.ResponseError):
        await ollama.AsyncClient(host=proxy.url).generate(model, "hi")
    await eventually(lambda: len(receiver.servers) >= 2 and len(receiver.clients) >= 2)
    first, second = receiver.servers
    assert len(first.attrs["gen_ai.input.messages"]) == 500
    # The model as the records name it, in every mode: never the text sent.
    assert second.attrs["gen_ai.request.model"] == "other"
    assert second.span.name == "text_completion other"
    assert all(
        len(v) <= 500 for s in receiver.spans for v in s.attrs.values() if isinstance(v, str)
    )

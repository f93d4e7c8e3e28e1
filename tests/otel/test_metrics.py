"""The optional OTLP metrics: the GenAI client histograms, with the conventions' buckets."""

from __future__ import annotations

import contextlib

import ollama
import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from ollama_tap.otel import metrics as om
from tests.conftest import MakeProxy
from tests.otel.receiver import Receiver, attributes
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, MESSAGES
from tests.support.waiting import eventually

NAMES = {
    "gen_ai.client.operation.duration": om.DURATION_BUCKETS,
    "gen_ai.client.token.usage": om.TOKEN_BUCKETS,
    "gen_ai.client.operation.time_to_first_chunk": om.FIRST_CHUNK_BUCKETS,
    "gen_ai.client.operation.time_per_output_chunk": om.PER_CHUNK_BUCKETS,
}


def latest(receiver: Receiver) -> dict[str, Metric]:
    return {m.name: m for m in receiver.metrics}


async def test_the_four_client_histograms_arrive_with_the_spec_buckets(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, receiver: Receiver
) -> None:
    fake_ollama.script = Script(prefill_delay=0.1, token_delay=0.02)
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_metrics=True)
    parts = [
        p
        async for p in await ollama.AsyncClient(host=proxy.url).chat(
            LLAMA, messages=MESSAGES, stream=True
        )
    ]
    final = parts[-1]
    await eventually(lambda: NAMES.keys() <= latest(receiver).keys() and receiver.servers)
    span = receiver.servers[0]
    got = latest(receiver)
    for name, buckets in NAMES.items():
        [*points] = got[name].histogram.data_points
        assert all(tuple(p.explicit_bounds) == tuple(float(b) for b in buckets) for p in points)
    [duration] = got["gen_ai.client.operation.duration"].histogram.data_points
    assert attributes(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ollama",
        "gen_ai.request.model": LLAMA,
        "server.address": "127.0.0.1",
        "server.port": int(fake_ollama.url.rsplit(":", 1)[1]),
    }
    # The same figures as the exchange's span, which test_spans.py checks against the fake.
    assert duration.count == 1 and abs(duration.sum - span.seconds) < 1e-6
    tokens = {
        attributes(p.attributes)["gen_ai.token.type"]: p.sum
        for p in got["gen_ai.client.token.usage"].histogram.data_points
    }
    assert tokens == {"input": final.prompt_eval_count, "output": final.eval_count}
    [first] = got["gen_ai.client.operation.time_to_first_chunk"].histogram.data_points
    ttft = span.attrs["ollama_tap.client.time_to_first_token"]
    assert first.count == 1 and first.sum == ttft >= 0.1


async def test_made_up_model_names_make_no_series_of_their_own(
    proxy_factory: MakeProxy, receiver: Receiver
) -> None:
    """The review's flood, scaled: every request names a new model (of 100 kB, or a valid
    name nobody has). Each used to be a metric series for good; the points name the model as
    the `model` label of the Prometheus metrics does: `other` until Ollama vouches for it."""
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_metrics=True)
    client = ollama.AsyncClient(host=proxy.url)
    names = [f"missing{i}-" + "y" * 100_000 for i in range(5)] + [f"nobody{i}" for i in range(5)]
    for name in names:
        # The fake, as Ollama, answers 404 for a model it does not have.
        with contextlib.suppress(ollama.ResponseError):
            await client.generate(name, "x")
    await client.generate(LLAMA, "x")

    def models() -> set[str]:
        points = latest(receiver).get("gen_ai.client.operation.duration")
        if points is None:
            return set()
        return {
            attributes(p.attributes)["gen_ai.request.model"] for p in points.histogram.data_points
        }

    await eventually(lambda: models() == {"other", LLAMA}, within=20)


async def test_a_failed_metrics_export_is_counted(
    proxy_factory: MakeProxy, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    receiver.refuse_metrics = True
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_metrics=True)
    await ollama.AsyncClient(host=proxy.url).generate(LLAMA, "x")
    labels = {"signal": "metrics", "reason": "export_failed"}
    # The duration and the two token counts at least, lost at each export.
    await eventually(lambda: (proxy.sample("ollama_tap_otel_dropped_total", labels) or 0) >= 3)

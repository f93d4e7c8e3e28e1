"""Spans made whole at the exchange's end still answer to the configured sampler, and the
CLIENT child carries only what names the upstream call."""

from __future__ import annotations

import ollama
import pytest

from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver, spans_of
from tests.support.metrics import LLAMA, MESSAGES

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"

QUEUE_FULL = {"signal": "spans", "reason": "queue_full"}


def traceparent(flags: str, trace_id: str = TRACE_ID) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-{flags}"}


async def test_an_unsampled_app_trace_makes_no_span_and_a_sampled_one_does(
    traced: Proxy, receiver: Receiver
) -> None:
    # The default sampler, parentbased_always_on, follows the app's decision.
    unsampled = ollama.AsyncClient(host=traced.url, headers=traceparent("00"))
    await unsampled.chat(LLAMA, messages=MESSAGES, stream=False)
    other = "0af7651916cd43dd8448eb211c80319c"
    sampled = ollama.AsyncClient(host=traced.url, headers=traceparent("01", other))
    await sampled.chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    assert {r.span.trace_id.hex() for r in receiver.spans} == {other}
    assert traced.sample("ollama_tap_otel_dropped_total", QUEUE_FULL) == 0


async def test_the_sampler_variable_is_followed(
    proxy_factory: MakeProxy, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    proxy = await proxy_factory(otlp_endpoint=receiver.url)
    # The ratio sampler keeps a trace iff its low 64 bits fall under the bound.
    kept, dropped = "0" * 16 + "0000000000000001", "0" * 16 + "ffffffffffffffff"
    for trace_id in (dropped, kept):
        client = ollama.AsyncClient(host=proxy.url, headers=traceparent("01", trace_id))
        await client.chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    assert {r.span.trace_id.hex() for r in receiver.spans} == {kept}


async def test_the_client_child_names_the_upstream_call_only(
    traced: Proxy, receiver: Receiver
) -> None:
    await ollama.AsyncClient(host=traced.url).chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    child, server = receiver.clients[0], receiver.servers[0]
    assert set(child.attrs) == {
        "gen_ai.operation.name", "gen_ai.request.model", "server.address", "server.port",
        "http.response.status_code",
    }  # fmt: skip
    assert {k: server.attrs[k] for k in child.attrs} == child.attrs
    assert child.span.start_time_unix_nano == server.span.start_time_unix_nano
    assert child.span.span_id != server.span.span_id

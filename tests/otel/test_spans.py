"""Spans through the real proxy: one SERVER span and its CLIENT child per exchange, named and
attributed as the GenAI conventions say, with the figures the fake's injected delays set."""

from __future__ import annotations

import socket

import ollama
import openai
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from ollama_tap.app import HOOKS, OTEL
from ollama_tap.hooks import observer_name
from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver, spans_of
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import LLAMA, MESSAGES, QWEN, TOL, near, settled, took

LOAD, QUEUE, PREFILL, TOKEN = 0.3, 0.2, 0.1, 0.03
OPTIONS = {"temperature": 0.25, "top_p": 0.5, "num_predict": 64, "num_ctx": 4096}

QUEUE_FULL = {"signal": "spans", "reason": "queue_full"}


async def test_a_streamed_chat_is_one_server_span_with_a_client_child_and_its_figures(
    traced: Proxy, fake_ollama: FakeOllama, receiver: Receiver
) -> None:
    thinking = ["Rayleigh", " scattering", "?"]
    fake_ollama.script = Script(
        load_delay=LOAD, queue_delay=QUEUE, prefill_delay=PREFILL, token_delay=TOKEN,
        thinking=thinking,
    )  # fmt: skip
    client = ollama.AsyncClient(host=traced.url)
    stream = await client.chat(QWEN, messages=MESSAGES, stream=True, think=True, options=OPTIONS)
    parts = [part async for part in stream]
    await settled(traced)
    await spans_of(receiver, 1)
    final = parts[-1]
    [server], [client_span] = receiver.servers, receiver.clients
    assert len(receiver.spans) == 2
    assert server.span.name == client_span.span.name == f"chat {QWEN}"
    assert client_span.span.parent_span_id == server.span.span_id
    assert client_span.span.trace_id == server.span.trace_id
    assert server.span.parent_span_id == b""  # no traceparent came: a trace of its own
    assert server.resource["service.name"] == "ollama-tap"

    a = server.attrs
    port = int(fake_ollama.url.rsplit(":", 1)[1])
    assert {k: a[k] for k in a if k.startswith(("gen_ai.", "server.", "http."))} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ollama",
        "gen_ai.system": "ollama",
        "gen_ai.request.model": QWEN,
        "gen_ai.response.model": QWEN,
        "gen_ai.request.temperature": 0.25,
        "gen_ai.request.top_p": 0.5,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.usage.input_tokens": final.prompt_eval_count,
        "gen_ai.usage.output_tokens": final.eval_count,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.input.messages": a["gen_ai.input.messages"],  # content: test_content.py
        "gen_ai.output.messages": a["gen_ai.output.messages"],
        "server.address": "127.0.0.1",
        "server.port": port,
        "http.request.method": "POST",
        "http.route": "/api/chat",
        "http.response.status_code": 200,
    }
    assert "error.type" not in a
    assert server.span.status.code == Status.STATUS_CODE_UNSET

    # Ollama's phases: exactly what the final object says (the injected delays bound them).
    assert a["ollama_tap.load_duration"] == final.load_duration / 1e9 >= LOAD
    assert a["ollama_tap.prefill_duration"] == final.prompt_eval_duration / 1e9 >= PREFILL
    assert a["ollama_tap.decode_duration"] == final.eval_duration / 1e9
    phases = final.load_duration + final.prompt_eval_duration + final.eval_duration
    queue = (final.total_duration - phases) / 1e9
    assert a["ollama_tap.queue_wait"] == pytest.approx(queue) and queue >= QUEUE - TOL
    assert a["ollama_tap.decode_rate"] == final.eval_count / (final.eval_duration / 1e9)
    size = final.prompt_eval_count + final.eval_count
    assert a["ollama_tap.context_utilization"] == size / OPTIONS["num_ctx"]
    assert a["ollama_tap.outcome"] == "ok" and a["ollama_tap.streamed"] is True
    assert a["ollama_tap.client"] == "ollama-python" and "ollama_tap.truncation" not in a

    # The client's view, against the fake's own first-token time.
    pieces = len(thinking) + len(fake_ollama.script.tokens)
    gap = final.eval_duration / 1e9 / (pieces - 1)
    ttft, ttfc = (
        a["ollama_tap.client.time_to_first_token"],
        a["ollama_tap.client.time_to_first_content"],
    )
    assert took(ttft, final.total_duration - final.eval_duration, LOAD + QUEUE + PREFILL)
    assert near(ttfc, ttft + len(thinking) * gap, TOL / 2) and ttfc > ttft
    assert near(a["ollama_tap.server.time_to_first_token"], ttft, TOL)
    assert took(server.seconds, final.total_duration, LOAD + QUEUE + PREFILL)

    # Events at the recorded times, on the span's clock.
    start = server.span.start_time_unix_nano
    first, content = (
        server.events["ollama_tap.first_token"],
        server.events["ollama_tap.first_content"],
    )
    assert abs((first - start) / 1e9 - ttft) < 1e-6
    assert abs((content - start) / 1e9 - ttfc) < 1e-6
    assert client_span.span.start_time_unix_nano >= start
    assert client_span.span.end_time_unix_nano <= server.span.end_time_unix_nano


@pytest.mark.parametrize(
    ("route", "name"),
    [("generate", f"text_completion {LLAMA}"), ("embed", f"embeddings {LLAMA}")],
)
async def test_generate_and_embed_spans_are_named_by_their_operation(
    traced: Proxy, receiver: Receiver, route: str, name: str
) -> None:
    client = ollama.AsyncClient(host=traced.url)
    if route == "generate":
        await client.generate(LLAMA, "Why is the sky blue?", stream=False)
    else:
        await client.embed(LLAMA, "Why is the sky blue?")
    await spans_of(receiver, 1)
    [server] = receiver.servers
    assert server.span.name == name
    assert server.attrs["gen_ai.operation.name"] == name.split()[0]
    assert server.attrs["ollama_tap.streamed"] is False


async def test_openai_parameters_come_from_the_top_level_of_the_body(
    traced: Proxy, receiver: Receiver
) -> None:
    client = openai.AsyncOpenAI(base_url=f"{traced.url}/v1", api_key="ollama")
    await client.chat.completions.create(
        model=LLAMA,
        messages=MESSAGES,
        temperature=0.75,
        top_p=0.25,
        max_tokens=32,  # type: ignore[arg-type]
    )
    await spans_of(receiver, 1)
    a = receiver.servers[0].attrs
    assert a["gen_ai.request.temperature"] == 0.75
    assert a["gen_ai.request.top_p"] == 0.25
    assert a["gen_ai.request.max_tokens"] == 32
    assert a["http.route"] == "/v1/chat/completions"


async def test_a_failed_exchange_carries_error_type_and_an_error_status(
    traced: Proxy, fake_ollama: FakeOllama, receiver: Receiver
) -> None:
    fake_ollama.script = Script(status_error=(500, "model runner crashed"))
    client = ollama.AsyncClient(host=traced.url)
    with pytest.raises(ollama.ResponseError):
        await client.chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    for got in (receiver.servers[0], receiver.clients[0]):
        assert got.attrs["error.type"] == "500"
        assert got.span.status.code == Status.STATUS_CODE_ERROR
        assert "model runner crashed" in got.span.status.message
    assert receiver.servers[0].attrs["ollama_tap.outcome"] == "upstream_error"


async def test_an_incoming_traceparent_makes_the_span_a_child_of_the_apps(
    traced: Proxy, receiver: Receiver
) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent_id}-01", "tracestate": "app=1"}
    client = ollama.AsyncClient(host=traced.url, headers=headers)
    await client.chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    server, child = receiver.servers[0].span, receiver.clients[0].span
    assert server.trace_id.hex() == child.trace_id.hex() == trace_id
    assert server.parent_span_id.hex() == parent_id
    assert server.trace_state == "app=1"
    assert child.parent_span_id == server.span_id


async def test_other_routes_make_no_span(traced: Proxy, receiver: Receiver) -> None:
    client = ollama.AsyncClient(host=traced.url)
    await client.list()
    await client.chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    assert {r.span.name for r in receiver.spans} == {f"chat {LLAMA}"}


async def test_the_opt_in_drops_the_old_provider_attribute(
    proxy_factory: MakeProxy, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-box-1")
    proxy = await proxy_factory(otlp_endpoint=receiver.url)
    await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    a = receiver.servers[0].attrs
    assert a["gen_ai.provider.name"] == "ollama" and "gen_ai.system" not in a
    assert receiver.servers[0].resource["service.name"] == "gpu-box-1"


async def test_export_is_off_without_an_endpoint(proxy: Proxy, receiver: Receiver) -> None:
    await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages=MESSAGES, stream=False)
    await settled(proxy)
    assert proxy.sample("ollama_tap_otel_dropped_total", QUEUE_FULL) == 0
    assert receiver.raw == []
    assert OTEL not in proxy.app
    assert "otel" not in {observer_name(o) for o in proxy.app[HOOKS].observers}


async def test_an_unreachable_upstream_still_makes_its_span(
    proxy_factory: MakeProxy, receiver: Receiver
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    proxy = await proxy_factory(otlp_endpoint=receiver.url, upstream=f"http://127.0.0.1:{port}")
    with pytest.raises(ollama.ResponseError):
        await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages=MESSAGES, stream=False)
    await spans_of(receiver, 1)
    server = receiver.servers[0]
    assert server.attrs["error.type"] == "upstream_unreachable"
    assert server.attrs["server.port"] == port
    assert server.attrs["http.response.status_code"] == 502
    assert receiver.clients[0].span.status.code == Status.STATUS_CODE_ERROR

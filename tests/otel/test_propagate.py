"""`--otel-propagate`: the upstream is told the proxy's CLIENT span as its parent; without
it, the upstream sees the app's head as the app sent it."""

from __future__ import annotations

import aiohttp
import ollama
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from ollama_tap.ollama.routes import ENDPOINTS
from ollama_tap.otel.semconv import operation_of
from ollama_tap.tracecontext import TraceIds, propagated, spanned
from tests.conftest import MakeProxy, Proxy
from tests.otel.receiver import Receiver, spans_of
from tests.support.fake_ollama import FakeOllama
from tests.support.metrics import LLAMA, MESSAGES

APP_TRACE, APP_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
APP = {"traceparent": f"00-{APP_TRACE}-{APP_SPAN}-01", "tracestate": "app=1"}
BODY = {"model": LLAMA, "messages": MESSAGES, "stream": False}


def last_chat(fake: FakeOllama) -> list[tuple[str, str]]:
    """The header pairs of the last /api/chat the fake got (the poller asks it too)."""
    return [r for r in fake.received if r.path_qs == "/api/chat"][-1].headers


def header(fake: FakeOllama, name: str) -> list[str]:
    return [v for k, v in last_chat(fake) if k.lower() == name]


async def test_the_upstream_is_told_the_client_span_in_the_apps_trace(
    proxy_factory: MakeProxy, receiver: Receiver, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_propagate=True)
    await ollama.AsyncClient(host=proxy.url, headers=APP).chat(LLAMA, messages=MESSAGES)
    await spans_of(receiver, 1)
    [sent] = header(fake_ollama, "traceparent")
    version, trace, parent, flags = sent.split("-")
    client, server = receiver.clients[0].span, receiver.servers[0].span
    assert (version, trace, flags) == ("00", APP_TRACE, "01")
    assert parent == client.span_id.hex() != APP_SPAN
    assert client.trace_id.hex() == server.trace_id.hex() == APP_TRACE
    assert client.parent_span_id == server.span_id
    assert server.parent_span_id.hex() == APP_SPAN
    assert header(fake_ollama, "tracestate") == ["app=1"]


async def test_without_an_app_trace_the_upstream_is_told_the_proxys(
    proxy_factory: MakeProxy, receiver: Receiver, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_propagate=True)
    for _ in range(2):
        await ollama.AsyncClient(host=proxy.url).chat(LLAMA, messages=MESSAGES)
    await spans_of(receiver, 2)
    [sent] = header(fake_ollama, "traceparent")
    _, trace, parent, flags = sent.split("-")
    client = receiver.clients[-1].span
    assert (trace, parent, flags) == (client.trace_id.hex(), client.span_id.hex(), "01")
    assert receiver.clients[0].span.trace_id != client.trace_id
    assert not header(fake_ollama, "tracestate")


async def relayed_heads(proxy: Proxy, fake_ollama: FakeOllama) -> list[list[tuple[str, str]]]:
    """The header pairs the fake got from the app directly, then through the proxy."""
    heads = []
    async with aiohttp.ClientSession(skip_auto_headers=("User-Agent",)) as s:
        for base in (fake_ollama.url, proxy.url):
            async with s.post(base + "/api/chat", json=BODY, headers=APP) as reply:
                assert reply.status == 200
                await reply.read()
            heads.append([(k, v) for k, v in last_chat(fake_ollama) if k != "Host"])
    return heads


async def test_off_the_upstream_sees_the_apps_head_unchanged(
    traced: Proxy, fake_ollama: FakeOllama, receiver: Receiver
) -> None:
    direct, relayed = await relayed_heads(traced, fake_ollama)
    assert relayed == direct
    assert ("traceparent", APP["traceparent"]) in relayed
    await spans_of(receiver, 1)  # exported all the same


async def test_the_setting_without_export_changes_nothing(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(otel_propagate=True)
    direct, relayed = await relayed_heads(proxy, fake_ollama)
    assert relayed == direct


class Head:
    """A request head as the transport holds it, for ollama_tap.tracecontext."""

    def __init__(self, headers: list[tuple[str, str]]) -> None:
        self.headers = CIMultiDictProxy(CIMultiDict(headers))
        self.rel_url = URL("/api/chat")
        self.trace_ids: TraceIds | None = None


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (f"00-{APP_TRACE}-{APP_SPAN}-01", (APP_TRACE, "01")),
        (f"00-{APP_TRACE}-{APP_SPAN}-00", (APP_TRACE, "00")),  # unsampled stays unsampled
        (f"00-{APP_TRACE}-{APP_SPAN}-01-extra", None),  # version 00 has four fields
        (f"ff-{APP_TRACE}-{APP_SPAN}-01", None),
        (f"00-{'0' * 32}-{APP_SPAN}-01", None),
        (f"00-{APP_TRACE}-{'0' * 16}-01", None),
        (f"00-{APP_TRACE[:-1]}-{APP_SPAN}-01", None),
        ("garbage", None),
    ],
)
def test_the_apps_traceparent_is_continued_when_valid(
    value: str, kept: tuple[str, str] | None
) -> None:
    """Read by the SDK's propagators (once: a retry gets the same ids); an invalid one starts
    the proxy's own sampled trace, without the app's tracestate."""
    head = Head(
        [("Content-Type", "application/json"), ("traceparent", value), ("tracestate", "app=1")]
    )
    sent = propagated(head)
    assert [k for k, _ in sent] == ["Content-Type", "traceparent", "tracestate"][: len(sent)]
    version, trace, span, flags = dict(sent)["traceparent"].split("-")
    ids = head.trace_ids
    assert ids is not None and propagated(head) == sent
    assert (version, trace, span) == ("00", f"{ids.trace_id:032x}", f"{ids.client_span_id:016x}")
    if kept is not None:
        assert (trace, flags) == kept and dict(sent)["tracestate"] == "app=1"
    else:
        assert trace != APP_TRACE and flags == "01" and "tracestate" not in dict(sent)


async def test_a_route_without_a_span_goes_up_unchanged(
    proxy_factory: MakeProxy, receiver: Receiver, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(otlp_endpoint=receiver.url, otel_propagate=True)
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/api/tags", headers=APP) as r:
        assert r.status == 200
    got = [r for r in fake_ollama.received if r.path_qs == "/api/tags"][-1].headers
    assert ("traceparent", APP["traceparent"]) in got and ("tracestate", "app=1") in got


def test_the_routes_told_are_those_that_get_spans() -> None:
    assert {e for e in ENDPOINTS if spanned(e)} == {e for e in ENDPOINTS if operation_of(e)}
    assert spanned("/api/chat") and not spanned("/api/tags")


def test_a_propagator_that_fails_leaves_the_request_untraced_by_the_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A custom propagator (OTEL_PROPAGATORS) that raises on what a client sent: the request
    goes up with the proxy's own trace, not an error."""
    from opentelemetry import propagate

    def fails(*args: object, **kwargs: object) -> None:
        raise ValueError("unreadable")

    monkeypatch.setattr(propagate, "extract", fails)
    head = Head([("traceparent", APP["traceparent"])])
    sent = dict(propagated(head))
    assert sent["traceparent"].split("-")[1] != APP_TRACE

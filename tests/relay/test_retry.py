"""A request whose reused upstream connection dies before any reply byte is sent again, once,
on a fresh connection, when a second send can do no harm (relay/retry.py); and the pool
keeps a connection only as long as the upstream says."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from structlog.testing import capture_logs

from ollama_tap.exchange import Exchange, Retry
from ollama_tap.relay.headers import IDLE_SECONDS, idle_life
from ollama_tap.relay.retry import may_resend, retry_reason
from tests.conftest import MakeProxy, Proxy
from tests.support.closing import (
    AFTER_FIRST_LINE,
    ANSWER,
    DROP,
    DROP_AFTER_BODY,
    PARTIAL_HEAD,
    ClosingUpstream,
    Plan,
    Step,
    answer,
)
from tests.support.records import records
from tests.support.relaying import MARK, RawHandler

Upstreams = Callable[[RawHandler], Awaitable[str]]
_RETRIES = "ollama_tap_upstream_retries_total"


async def _proxy(
    proxy_factory: MakeProxy, raw_upstream: Upstreams, plan: Plan, **kw: Any
) -> tuple[Proxy, ClosingUpstream]:
    upstream = ClosingUpstream(plan)
    proxy = await proxy_factory(upstream=await raw_upstream(upstream.serve), **kw)
    return proxy, upstream


def _retries(proxy: Proxy) -> dict[str, float]:
    return {reason: proxy.sample(_RETRIES, {"reason": reason}) or 0.0 for reason in Retry}


def _first_only(conn: int, number: int, head: bytes) -> Step:
    """Each connection answers one request and dies at the next (no `Connection: close`)."""
    return Step(ANSWER if number == 0 else DROP)


def _closes_after_reply(conn: int, number: int, head: bytes) -> Step:
    return Step(ANSWER, then_close=True)


@pytest.mark.parametrize(
    "plan", [_first_only, _closes_after_reply], ids=["at its next request", "at once"]
)
async def test_an_upstream_closing_after_every_reply_answers_every_request(
    plan: Plan, proxy_factory: MakeProxy, raw_upstream: Upstreams
) -> None:
    proxy, upstream = await _proxy(proxy_factory, raw_upstream, plan)
    kinds = [(p, s) for p in ("/api/generate", "/api/chat") for s in (True, False)]
    async with aiohttp.ClientSession(headers=MARK) as s:
        for i in range(150):
            path, stream = kinds[i % 4]
            body = {"model": "llama3.2", "prompt": "hi", "stream": stream}
            async with s.post(proxy.url + path, data=orjson.dumps(body)) as resp:
                got = (resp.status, await resp.read())
            want = answer(f"POST {path} HTTP/1.1".encode(), orjson.dumps(body))
            assert got[0] == 200, (i, got)
            if not stream:
                assert got[1] == want.partition(b"\r\n\r\n")[2]
            assert got[1].endswith(b'"done":true,"done_reason":"stop","eval_count":1}\n')
    answered = [r for r in upstream.received if r.body is not None]
    assert len(answered) == 150
    retries = _retries(proxy)
    # Each request that met a dead connection was sent again once, and counted.
    assert sum(retries.values()) == upstream.dropped
    if plan is _first_only:
        assert retries[Retry.CLOSED] >= 74
    found = await records(proxy, 150, limit="200")
    assert sum(1 for r in found if r["retried"] is not None) == upstream.dropped
    assert {r["retried"] for r in found} <= {None, *Retry}


@pytest.mark.parametrize(
    ("method", "path"), [("DELETE", "/api/delete"), ("POST", "/api/create"), ("POST", "/api/pull")]
)
async def test_a_management_request_is_never_sent_twice(
    method: str, path: str, proxy_factory: MakeProxy, raw_upstream: Upstreams
) -> None:
    """Its connection dies after the upstream read its body: the client gets the clear 502."""
    proxy, upstream = await _proxy(
        proxy_factory,
        raw_upstream,
        lambda conn, number, head: Step(ANSWER if number == 0 else DROP_AFTER_BODY),
    )
    async with aiohttp.ClientSession(headers=MARK) as s:
        async with s.get(proxy.url + "/api/version") as resp:
            assert resp.status == 200
        async with s.request(method, proxy.url + path, json={"model": "llama3.2"}) as resp:
            status, reply = resp.status, await resp.json()
    assert status == 502, reply
    assert "broke off the exchange without a valid reply" in reply["error"]
    assert upstream.count(path.encode()) == 1
    assert sum(_retries(proxy).values()) == 0
    (record,) = await records(proxy, 1, endpoint=path)
    assert record["retried"] is None


@pytest.mark.parametrize("cut", [PARTIAL_HEAD, AFTER_FIRST_LINE])
async def test_an_inference_request_is_not_sent_again_after_a_reply_byte(
    cut: str, proxy_factory: MakeProxy, raw_upstream: Upstreams
) -> None:
    proxy, upstream = await _proxy(
        proxy_factory, raw_upstream, lambda conn, n, head: Step(ANSWER if n == 0 else cut)
    )
    body = {"model": "llama3.2", "messages": [], "stream": True}
    async with aiohttp.ClientSession(headers=MARK) as s:
        async with s.post(proxy.url + "/api/chat", data=orjson.dumps(body)) as resp:
            assert resp.status == 200
            await resp.read()
        async with s.post(proxy.url + "/api/chat", data=orjson.dumps(body)) as resp:
            assert resp.status == (502 if cut == PARTIAL_HEAD else 200)
            if resp.status == 200:
                with pytest.raises(aiohttp.ClientPayloadError):  # cut as the upstream cut it
                    await resp.read()
    assert upstream.count(b"/api/chat") == 2
    assert sum(_retries(proxy).values()) == 0


async def test_a_request_is_sent_again_at_most_once(
    proxy_factory: MakeProxy, raw_upstream: Upstreams
) -> None:
    """The upstream answers one request; then every connection dies at its first."""
    seen: list[int] = []

    def plan(conn: int, number: int, head: bytes) -> Step:
        seen.append(conn)
        return Step(ANSWER if len(seen) == 1 else DROP)

    proxy, upstream = await _proxy(proxy_factory, raw_upstream, plan)
    body = {"model": "llama3.2", "input": "hi"}
    async with aiohttp.ClientSession(headers=MARK) as s:
        async with s.post(proxy.url + "/api/embed", json=body) as resp:
            assert resp.status == 200
        with capture_logs() as logs:
            async with s.post(proxy.url + "/api/embed", json=body) as resp:
                assert resp.status == 502
            await asyncio.sleep(0.05)
    assert upstream.count(b"/api/embed") == 3  # answered, then the request sent twice
    assert len(set(seen)) == 2  # the second time on a connection of its own
    assert _retries(proxy) == {Retry.CLOSED: 1.0, Retry.RESET: 0.0}
    (line,) = [e for e in logs if e["event"] == "exchange"]
    assert line["retried"] == "reused_connection_closed"
    assert line["status"] == 502
    found = await records(proxy, 2, endpoint="/api/embed")
    assert [r["retried"] for r in found] == ["reused_connection_closed", None]


async def _streamed_chat(proxy: Proxy, parts: list[bytes]) -> tuple[bytes, bytes]:
    """A chunked POST /api/chat whose body arrives in pieces 0.1 s apart; the reply's head
    line and its body."""
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Test: 1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for part in parts:
        writer.write(b"%x\r\n%b\r\n" % (len(part), part))
        await asyncio.sleep(0.1)
    writer.write(b"0\r\n\r\n")
    reply = await reader.read(65536)
    writer.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


@pytest.mark.parametrize("at_hand", [True, False])
async def test_a_streamed_upload_is_sent_again_only_if_what_was_sent_is_at_hand(
    at_hand: bool, proxy_factory: MakeProxy, raw_upstream: Upstreams
) -> None:
    """The upstream drops the reused connection at the head, while the body still arrives."""
    body = orjson.dumps({"model": "llama3.2", "messages": [{"role": "user", "content": "x" * 200}]})
    parts = [body[:100], body[100:]]
    proxy, upstream = await _proxy(
        proxy_factory,
        raw_upstream,
        lambda conn, number, head: Step(ANSWER if number == 0 else DROP),
        body_tee_limit=1 << 20 if at_hand else 64,
    )
    async with aiohttp.ClientSession(headers=MARK) as s:
        async with s.get(proxy.url + "/api/version") as resp:
            assert resp.status == 200
    line, reply = await _streamed_chat(proxy, parts)
    assert line == (b"HTTP/1.1 200 OK" if at_hand else b"HTTP/1.1 502 Bad Gateway"), reply
    chats = [r for r in upstream.received if r.line.startswith(b"POST /api/chat ")]
    if at_hand:
        assert [r.body for r in chats] == [None, body]  # dropped at the head, then whole
        assert sum(_retries(proxy).values()) == 1
    else:
        assert [r.body for r in chats] == [None]
        assert sum(_retries(proxy).values()) == 0


def test_the_rule_follows_what_a_second_send_costs() -> None:
    for endpoint in ("/api/generate", "/api/chat", "/api/embed", "/api/embeddings"):
        assert may_resend("POST", endpoint)
    for endpoint in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        assert may_resend("POST", endpoint)
    assert may_resend("POST", "/v1/embeddings") and may_resend("POST", "/v1/messages")
    assert may_resend("GET", "/api/tags") and may_resend("PUT", "other")
    assert not may_resend("POST", "other") and not may_resend("PATCH", "/api/show")
    for endpoint in ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"):
        assert not may_resend("POST", endpoint) and not may_resend("DELETE", endpoint)
    assert not may_resend("HEAD", "/api/blobs/:digest")

    ex = Exchange("POST", "/api/chat", "", "/api/chat", "", {})
    assert retry_reason(ex, reused=True, replied=False, reset=False) is Retry.CLOSED
    assert retry_reason(ex, reused=True, replied=False, reset=True) is Retry.RESET
    # a fresh connection's failure; a byte of the reply came
    assert retry_reason(ex, reused=False, replied=False, reset=False) is None
    assert retry_reason(ex, reused=True, replied=True, reset=False) is None
    ex.retried = Retry.CLOSED
    assert retry_reason(ex, reused=True, replied=False, reset=False) is None  # never twice


def test_the_idle_life_is_what_the_upstream_announces_less_a_margin() -> None:
    assert idle_life(None) == IDLE_SECONDS
    assert idle_life("timeout=5, max=100") == 4.0
    assert idle_life("max=100,Timeout=3") == 2.0
    assert idle_life("timeout=1") == 0.0
    assert idle_life("timeout=600") == IDLE_SECONDS
    assert idle_life("timeout=x, max=5") == IDLE_SECONDS


@pytest.mark.parametrize(
    ("headers", "pause", "fresh"),
    [
        (b"Keep-Alive: timeout=3\r\n", 2.2, True),
        (b"Keep-Alive: timeout=3\r\n", 0.0, False),
        (b"Keep-Alive: timeout=1\r\n", 0.0, True),
        (b"Connection: close\r\n", 0.0, True),
    ],
)
async def test_a_connection_is_kept_only_as_long_as_the_upstream_says(
    headers: bytes,
    pause: float,
    fresh: bool,
    proxy_factory: MakeProxy,
    raw_upstream: Upstreams,
) -> None:
    """The upstream keeps every connection open: what the proxy does is what its head said."""
    proxy, upstream = await _proxy(
        proxy_factory, raw_upstream, lambda conn, number, head: Step(ANSWER, headers)
    )
    async with aiohttp.ClientSession(headers=MARK) as s:
        for i in range(2):
            if i:
                await asyncio.sleep(pause)
            async with s.post(proxy.url + "/api/chat", json={"model": "m", "stream": False}) as r:
                assert r.status == 200
    assert upstream.count(b"/api/chat") == 2
    assert len(upstream.used) == (2 if fresh else 1)
    assert sum(_retries(proxy).values()) == 0

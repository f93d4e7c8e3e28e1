"""Transparency: what a client gets through the proxy is what it gets from Ollama directly."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import orjson
import pytest

from ollama_tap.exchange import Outcome
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.spy import Spy
from tests.support.transparency import ROUTES, comparable, fetch

# Fields that differ between two runs only because time passed: normalised before comparing.
_CLOCK = re.compile(
    rb'("created_at":"[^"]*"|"(?:total|load|prompt_eval|eval)_duration":\d+|"created":\d+'
    rb'|"expires_at":"[^"]*"|"(?:id|request_id|item_id)":"[^"]*"|"modified_at":"[^"]*")'
)


@pytest.fixture
async def raw_session() -> Any:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_every_route_matches_a_direct_connection(
    method: str,
    path: str,
    body: Any,
    proxy: Proxy,
    fake_ollama: FakeOllama,
    raw_session: aiohttp.ClientSession,
) -> None:
    direct = await fetch(raw_session, method, fake_ollama.url + path, body)
    relayed = await fetch(raw_session, method, proxy.url + path, body)
    assert relayed[0] == direct[0]
    assert comparable(relayed[1]) == comparable(direct[1])
    length = dict((k.lower(), v) for k, v in relayed[1]).get("content-length")
    if length is not None and method != "HEAD":
        assert int(length) == len(relayed[2])
    assert _CLOCK.sub(b"", relayed[2]) == _CLOCK.sub(b"", direct[2])


async def test_upstream_receives_the_clients_headers_and_nothing_else(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    upstream = fake_ollama.url.removeprefix("http://")
    async with aiohttp.ClientSession(
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding")
    ) as s:
        await fetch(
            s,
            "POST",
            proxy.url + "/api/show?verbose=1",
            {"model": "llama3.2"},
            headers={
                "X-Custom": "kept",
                "Origin": "http://localhost:3000",
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "dropped",
            },
        )
    # The client's request, not a read of the poller's that may have landed after it.
    (got,) = [r for r in fake_ollama.received if r.path_qs == "/api/show?verbose=1"]
    names = [k.lower() for k, _ in got.headers]
    assert dict((k.lower(), v) for k, v in got.headers)["host"] == upstream
    assert "user-agent" not in names and "accept-encoding" not in names and "accept" not in names
    assert ("Origin", "http://localhost:3000") in got.headers
    assert ("X-Custom", "kept") in got.headers
    assert "x-hop" not in names and "connection" not in names
    assert got.path_qs == "/api/show?verbose=1"
    assert got.body == orjson.dumps({"model": "llama3.2"})


async def test_dns_rebinding_is_refused_like_ollama(
    proxy: Proxy, raw_session: aiohttp.ClientSession
) -> None:
    for path in ("/api/tags", "/_tap/healthz", "/metrics", "/_tap/api/records"):
        status, _headers, body = await fetch(
            raw_session, "GET", proxy.url + path, headers={"Host": "evil.example.com"}
        )
        assert (status, body) == (403, b""), path
    for host in (
        "localhost:11435",
        "my-box.local",
        "host.docker.internal",
        "10.1.2.3:80",
        "[::1]:1",
    ):
        status, _, _ = await fetch(raw_session, "GET", proxy.url + "/", headers={"Host": host})
        assert status == 200, host


async def test_public_host_reaches_ollama_on_a_non_loopback_bind(
    proxy_factory: MakeProxy, raw_session: aiohttp.ClientSession
) -> None:
    proxy = await proxy_factory(host="0.0.0.0")
    status, _, body = await fetch(
        raw_session, "GET", proxy.url + "/", headers={"Host": "ollama.example.com"}
    )
    assert (status, body) == (200, b"Ollama is running")


async def test_upstream_unreachable_gives_502_in_each_family_shape(
    proxy_factory: MakeProxy, raw_session: aiohttp.ClientSession, unused_tcp_port: int
) -> None:
    proxy = await proxy_factory(upstream=f"http://127.0.0.1:{unused_tcp_port}")
    status, _, body = await fetch(raw_session, "POST", proxy.url + "/api/generate", {"model": "m"})
    assert status == 502
    message = orjson.loads(body)["error"]
    assert message.startswith(
        f"ollama-tap: cannot reach Ollama at http://127.0.0.1:{unused_tcp_port}"
    )
    status, _, body = await fetch(raw_session, "POST", proxy.url + "/v1/chat/completions", {})
    assert status == 502
    assert orjson.loads(body)["error"]["message"].startswith("ollama-tap: cannot reach Ollama")
    status, _, body = await fetch(raw_session, "POST", proxy.url + "/v1/messages", {})
    assert status == 502
    doc = orjson.loads(body)
    assert doc["type"] == "error" and doc["error"]["message"].startswith("ollama-tap:")
    assert proxy.sample(
        "ollama_tap_request_errors_total",
        {"endpoint": "/api/generate", "model": "m", "kind": "upstream_unreachable"},
    ) in (1.0, None)  # the label may be "other" when the name is unknown; checked in metrics tests


async def test_upstream_dying_mid_stream_cuts_the_client_like_a_direct_connection(
    proxy: Proxy, fake_ollama: FakeOllama, raw_session: aiohttp.ClientSession
) -> None:
    fake_ollama.script = Script(tokens=["a"] * 10, die_after=3)
    body = {"model": "llama3.2", "prompt": "hi"}
    for base in (fake_ollama.url, proxy.url):
        with pytest.raises(aiohttp.ClientPayloadError):
            await fetch(raw_session, "POST", base + "/api/generate", body)
    fake_ollama.script = Script()
    status, _, _ = await fetch(raw_session, "POST", proxy.url + "/api/generate", body)
    assert status == 200


async def test_healthz_needs_no_auth_and_reveals_nothing(
    proxy: Proxy, raw_session: aiohttp.ClientSession
) -> None:
    for _ in range(50):
        status, _, body = await fetch(raw_session, "GET", proxy.url + "/_tap/healthz")
        if orjson.loads(body) == {"upstream": "up"}:
            break
        await asyncio.sleep(0.05)
    assert status == 200
    assert orjson.loads(body) == {"upstream": "up"}


async def test_stream_error_and_incomplete_outcomes(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, raw_session: aiohttp.ClientSession
) -> None:
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    body = {"model": "llama3.2", "prompt": "hi"}
    fake_ollama.script = Script(error_after=2)
    await fetch(raw_session, "POST", proxy.url + "/api/generate", body)
    fake_ollama.script = Script(no_final=True)
    await fetch(raw_session, "POST", proxy.url + "/api/generate", body)
    fake_ollama.script = Script()
    await fetch(raw_session, "POST", proxy.url + "/api/generate", body)
    await fetch(raw_session, "POST", proxy.url + "/api/generate", {"model": "nope", "prompt": "x"})
    assert [ex.outcome for ex in spy.ended] == [
        Outcome.STREAM_ERROR,
        Outcome.INCOMPLETE,
        Outcome.OK,
        Outcome.UPSTREAM_ERROR,
    ]
    assert spy.ended[0].error_message == Script().error_message
    assert [ex.request.model for ex in spy.ended] == ["llama3.2"] * 3 + ["nope"]


async def test_unknown_tap_paths_are_the_proxys_own_404(
    proxy: Proxy, fake_ollama: FakeOllama, raw_session: aiohttp.ClientSession
) -> None:
    before = len(fake_ollama.received)
    status, _, body = await fetch(
        raw_session,
        "GET",
        proxy.url + "/_tap/nothing-here",
        headers={"Authorization": "Bearer test-admin-token"},
    )
    assert status == 404
    assert orjson.loads(body)["error"].startswith("ollama-tap: no such path /_tap/nothing-here")
    assert not [r for r in fake_ollama.received[before:] if r.path_qs.startswith("/_tap")]


async def test_a_request_line_in_absolute_form_is_relayed(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        f"GET http://127.0.0.1:{proxy.port}/api/version HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{proxy.port}\r\nConnection: close\r\n\r\n".encode()
    )
    reply = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert reply.endswith(b'{"version":"0.33.0-rc2"}')
    assert fake_ollama.received[-1].path_qs == "/api/version"


async def test_a_large_single_reply_is_still_read(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama, raw_session: aiohttp.ClientSession
) -> None:
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    body = {"model": "all-minilm", "input": [f"text {i}" for i in range(300)]}
    direct = await fetch(raw_session, "POST", fake_ollama.url + "/api/embed", body)
    relayed = await fetch(raw_session, "POST", proxy.url + "/api/embed", body)
    assert len(relayed[2]) > 256 * 1024
    assert _CLOCK.sub(b"", relayed[2]) == _CLOCK.sub(b"", direct[2])
    (ex,) = await spy.wait_ended()  # the exchange ends once the parse in the thread is done
    assert ex.outcome == Outcome.OK
    assert ex.usage is not None and ex.usage.prompt_eval_count > 0
    assert len(ex.final["embeddings"]) == 300

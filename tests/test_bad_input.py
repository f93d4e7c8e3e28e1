"""Bad input is forwarded unchanged (Ollama decides) and never crashes the proxy."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from ollama_tap.exchange import Outcome
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.spy import Spy
from tests.support.transparency import fetch


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b'{"model": "llama3.2", "prompt": ', {"Content-Type": "application/json"}),
        (b"", {"Content-Type": "application/json"}),
        (b'["not", "an", "object"]', {"Content-Type": "application/json"}),
        (b'{"model": 42, "stream": "yes", "options": []}', {}),
        (b"\xff\xfe\x00garbage", {"Content-Type": "text/plain"}),
        (b'{"model": "llama3.2", "prompt": "hi"}', {"Content-Type": "image/png"}),
    ],
    ids=["truncated", "empty", "array", "wrong-types", "binary", "wrong-type-header"],
)
async def test_malformed_bodies_are_forwarded_unchanged(
    body: bytes, headers: dict[str, str], proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    async with aiohttp.ClientSession() as s:
        direct = await s.post(fake_ollama.url + "/api/generate", data=body, headers=headers)
        direct_body = await direct.read()
        relayed = await s.post(proxy.url + "/api/generate", data=body, headers=headers)
        relayed_body = await relayed.read()
    assert fake_ollama.received[-1].body == body
    assert relayed.status == direct.status
    if direct.status >= 400:
        assert relayed_body == direct_body
    assert len(spy.ended) == 1 and spy.ended[0].outcome is not None


async def test_absurd_paths(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    async with aiohttp.ClientSession() as s:
        for path in (
            "/../../etc/passwd",
            "/api/" + "x" * 4000,
            "/%00%ff",
            "/api//tags",
            "/v1/models/a%2Fb",
        ):
            direct = await fetch(s, "GET", fake_ollama.url + path)
            relayed = await fetch(s, "GET", proxy.url + path)
            assert relayed[0] == direct[0], path
            assert relayed[2] == direct[2], path


async def test_garbage_on_the_socket_does_not_hurt_the_proxy(proxy: Proxy) -> None:
    host, port = proxy.host, proxy.port
    for garbage in (
        b"\x16\x03\x01\x00\xa5\x01\x00\x00",
        b"GET\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    ):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(garbage)
        await writer.drain()
        await asyncio.wait_for(reader.read(1000), 5)
        writer.close()
    async with aiohttp.ClientSession() as s:
        status, _, body = await fetch(s, "GET", proxy.url + "/")
    assert (status, body) == (200, b"Ollama is running")


async def test_a_client_that_trickles_its_body(proxy_factory: MakeProxy) -> None:
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    body = b'{"model": "llama3.2", "prompt": "hi", "stream": false}'
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    head = (
        "POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head)
    for i in range(0, len(body), 7):
        writer.write(body[i : i + 7])
        await writer.drain()
        await asyncio.sleep(0.02)
    reply = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 200")
    assert b"The sky is blue." in reply
    assert spy.ended[0].outcome == Outcome.OK
    assert spy.ended[0].request.model == "llama3.2"
    assert spy.ended[0].request.stream is False


async def test_a_failing_observer_never_breaks_the_stream(proxy_factory: MakeProxy) -> None:
    class Broken:
        name = "broken"

        def request(self, ex: object) -> None:
            raise RuntimeError("boom")

        def chunk(self, ex: object, piece: object) -> None:
            raise RuntimeError("boom")

        def response(self, ex: object) -> None:
            raise RuntimeError("boom")

    spy = Spy()
    proxy = await proxy_factory(observers=(Broken(), spy))
    async with aiohttp.ClientSession() as s:
        status, _, body = await fetch(
            s, "POST", proxy.url + "/api/generate", {"model": "llama3.2", "prompt": "hi"}
        )
    assert status == 200 and b'"done":true' in body
    assert spy.ended[0].outcome == Outcome.OK
    labels = {"observer": "broken", "hook": "chunk"}
    assert proxy.sample("ollama_tap_observer_errors_total", labels) == 5
    assert (
        proxy.sample("ollama_tap_observer_errors_total", {"observer": "broken", "hook": "request"})
        == 1
    )

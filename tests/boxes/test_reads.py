"""A body that arrives in several reads, behind two boxes: one the head says is small is
routed once it is whole, by its model; one that streams (chunked) is routed before it."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
from pytest_aiohttp import AiohttpServer

from ollama_tap.app import BOXES
from ollama_tap.ollama.names import model_key
from tests.boxes.conftest import MODELS, box
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import records
from tests.support.waiting import eventually

LLAMA = MODELS[0]
BODY = b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"stream":false}' % (
    LLAMA.encode()
)


def in_two_reads(port: int, framing: bytes, *pieces: bytes) -> bytes:
    """A POST /api/chat whose head goes first, then each piece a moment apart (a slow
    client: each write is a read of its own on the proxy's side); the reply to its close."""
    head = (
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\n" + framing + b"\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for piece in pieces:
            time.sleep(0.2)
            sock.sendall(piece)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


async def two_boxes(
    aiohttp_server: AiohttpServer, proxy_factory: MakeProxy
) -> tuple[Proxy, dict[str, FakeOllama]]:
    """gpu1 and gpu2, each listing the models, LLAMA resident on gpu2 only (given second:
    by rank alone gpu1 would win)."""
    fakes = {name: (await box(aiohttp_server))[0] for name in ("gpu1", "gpu2")}
    proxy = await proxy_factory(upstream=tuple(f"{n}={f.url}" for n, f in fakes.items()))
    on_gpu2 = {"X-Ollama-Tap-Upstream": "gpu2"}
    body = {"model": LLAMA, "messages": [], "stream": False}
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/api/chat", json=body, headers=on_gpu2) as resp,
    ):
        assert resp.status == 200
    gpu2 = proxy.app[BOXES].by_name["gpu2"]
    await eventually(lambda: gpu2.poller.resident(model_key(LLAMA)))
    return proxy, fakes


async def test_a_small_body_in_two_reads_is_routed_by_its_model(
    aiohttp_server: AiohttpServer, proxy_factory: MakeProxy
) -> None:
    proxy, fakes = await two_boxes(aiohttp_server, proxy_factory)
    framing = b"Content-Length: %d\r\n" % len(BODY)
    reply = await asyncio.to_thread(in_two_reads, proxy.port, framing, BODY[:30], BODY[30:])
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    newest = (await records(proxy, 2))[0]
    assert (newest["box"], newest["model"]) == ("gpu2", LLAMA)
    assert newest["route"].startswith(f"{LLAMA} resident on gpu2"), newest["route"]
    assert [r.body for r in fakes["gpu2"].received if r.method == "POST"][-1] == BODY
    assert not [r for r in fakes["gpu1"].received if r.path_qs == "/api/chat"]
    assert fakes["gpu1"].scheduler is not None and fakes["gpu1"].scheduler.loads == []


async def test_a_chunked_body_is_routed_before_its_model_is_read(
    aiohttp_server: AiohttpServer, proxy_factory: MakeProxy
) -> None:
    proxy, _ = await two_boxes(aiohttp_server, proxy_factory)
    chunks = [b"%x\r\n%b\r\n" % (len(p), p) for p in (BODY[:30], BODY[30:])]
    framing = b"Transfer-Encoding: chunked\r\n"
    reply = await asyncio.to_thread(in_two_reads, proxy.port, framing, *chunks, b"0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    newest = (await records(proxy, 2))[0]
    assert newest["model"] == LLAMA  # read once whole, for the record
    assert newest["route"] == (
        "the body streams in, its model unread; gpu1 has the fewest exchanges"
    ), newest["route"]

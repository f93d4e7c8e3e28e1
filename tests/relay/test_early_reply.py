"""A reply that comes before the request body ended still leaves the request on record.

Ollama binds a request's JSON before it answers, but a gateway or cache in front of it may
answer at once; and a client that sends its body after its head (httpx does) can then get
the reply first. The record keeps the body and the model all the same, the relay stays
usable for the next request, and an upload the proxy could not send at all (a dead
upstream, with `Expect: 100-continue`) is recorded too.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Final

import ollama
import pytest

from ollama_tap.exchange import Outcome
from tests.conftest import MakeProxy, Proxy
from tests.support.records import records
from tests.support.relaying import RawHandler, read_head
from tests.support.spy import Spy

BODY: Final = b'{"model":"early-model","prompt":"' + b"x" * 2000 + b'"}'
REFUSED: Final = b'{"error":"refused at the gate"}'
LINES: Final = (
    b'{"model":"m","response":"Hi","done":false}\n',
    b'{"model":"m","response":"","done":true,"eval_count":1}\n',
)
STREAM: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%b\r\n" % (len(line), line) for line in LINES)
    + b"0\r\n\r\n"
)
REPLIES: Final = {
    "error": b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%b" % (len(REFUSED), REFUSED),
    "stream": STREAM,
}


def answer_at_once(reply: bytes) -> RawHandler:
    """An upstream that answers each POST as soon as its head arrives, reading none of its
    body, and then closes the connection; GETs (the proxy's poller) get a 404."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await read_head(reader):
                if not head.startswith(b"POST"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                writer.write(reply)
                await writer.drain()
                return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    return serve


async def _reply(reader: asyncio.StreamReader) -> bytes:
    """One whole reply (Content-Length or chunked) off a client connection."""
    head = await read_head(reader)
    if b"chunked" in head.lower():
        return head + await reader.readuntil(b"0\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


@pytest.mark.parametrize("first", [100, 0])
@pytest.mark.parametrize("kind", sorted(REPLIES))
async def test_a_reply_before_the_body_keeps_the_body_and_model(
    first: int,
    kind: str,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    proxy_factory: MakeProxy,
) -> None:
    """The client sends the head and `first` bytes of the body (or none: the request goes
    upstream on its head), the rest once it has the reply."""
    spy = Spy()
    url = await raw_upstream(answer_at_once(REPLIES[kind]))
    proxy = await proxy_factory(upstream=url, observers=(spy,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY[:first])
    )
    reply = await asyncio.wait_for(_reply(reader), 5)
    assert reply.startswith(b"HTTP/1.1 400" if kind == "error" else b"HTTP/1.1 200")
    await asyncio.sleep(0.05)  # the rest comes well after the reply
    writer.write(BODY[first:])
    [ex] = await spy.wait_ended()
    assert ex.outcome is (Outcome.UPSTREAM_ERROR if kind == "error" else Outcome.OK)
    assert (ex.request_body, ex.request_bytes, ex.model) == (BODY, len(BODY), "early-model")
    [record] = await records(proxy, 1)
    assert record["model"] == "early-model:latest"
    # The connection serves the next request as usual.
    writer.write(b"GET /api/tags HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert (await asyncio.wait_for(_reply(reader), 5)).startswith(b"HTTP/1.1 404")
    writer.close()


async def test_ollama_client_against_an_upstream_that_answers_at_once(
    raw_upstream: Callable[[RawHandler], Awaitable[str]], proxy_factory: MakeProxy
) -> None:
    # httpx writes the head and the body apart: the reply can come in between.
    reply = b'{"embedding":[0.5]}'
    url = await raw_upstream(answer_at_once(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
        % (len(reply), reply)
    ))  # fmt: skip
    spy = Spy()
    proxy = await proxy_factory(upstream=url, observers=(spy,))
    client = ollama.Client(host=proxy.url)
    for _ in range(5):
        embedded = await asyncio.to_thread(client.embeddings, "all-minilm", "a")
        assert list(embedded.embedding) == [0.5]
    ended = await spy.wait_ended(5)
    assert [ex.model for ex in ended] == ["all-minilm"] * 5


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_expect_continue_upload_to_a_dead_upstream_is_recorded(
    proxy_factory: MakeProxy,
) -> None:
    spy = Spy()
    proxy: Proxy = await proxy_factory(
        upstream=f"http://127.0.0.1:{_dead_port()}", observers=(spy,)
    )
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    )
    assert await asyncio.wait_for(read_head(reader), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(BODY)
    reply = await asyncio.wait_for(_reply(reader), 5)
    assert reply.startswith(b"HTTP/1.1 502")
    [ex] = await spy.wait_ended()
    assert ex.outcome is Outcome.UPSTREAM_UNREACHABLE
    assert (ex.request_bytes, ex.model) == (len(BODY), "early-model")
    writer.close()

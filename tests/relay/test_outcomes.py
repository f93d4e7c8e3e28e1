"""Outcomes that tell the truth when the client closes as soon as it has its answer.

Many clients close their connection right after the final object (`done:true`, `[DONE]`,
`message_stop`, `response.completed`) without waiting for the end of the chunked body:
openai-python's sync stream always does, and so does code that returns at `done`. The
upstream here ends its body 300 ms after the final object, so the client's close always
comes first: the exchange is `ok` (the client has every line), the upstream connection is
closed at once all the same, and only a client that leaves before the final object is
`client_disconnected`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

import ollama
import openai
import orjson
import pytest

from ollama_tap.exchange import Outcome
from tests.conftest import MakeProxy, Proxy
from tests.support.metrics import samples
from tests.support.relaying import RawHandler, read_head
from tests.support.spy import Spy
from tests.support.waiting import eventually

RUNS: Final = 20
LATE: Final = 0.3
"""How long after the final object the upstream ends its body."""
STARTED: Final = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n"


def _sse(event: str, data: dict[str, object]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (event.encode(), orjson.dumps(data))


def _chat_chunk(delta: dict[str, object], finish: str | None) -> bytes:
    chunk = {
        "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip
    return b"data: %s\n\n" % orjson.dumps(chunk)


NATIVE_FINAL: Final = orjson.dumps({
    "model": "m", "created_at": "2026-01-01T00:00:01Z", "response": "", "done": True,
    "done_reason": "stop", "total_duration": 9000, "prompt_eval_count": 3, "eval_count": 2,
}) + b"\n"  # fmt: skip
RESPONSE: Final = {"id": "r1", "object": "response", "status": "completed", "model": "m"}
STREAMS: Final[dict[str, tuple[bytes, list[bytes], bytes]]] = {
    # route: (content type, the pieces before the final one, the final one)
    "/api/generate": (b"application/x-ndjson", [
        orjson.dumps({"model": "m", "created_at": "2026-01-01T00:00:00Z", "response": "Hi",
                      "done": False}) + b"\n",
    ], NATIVE_FINAL),
    "/v1/chat/completions": (b"text/event-stream", [
        _chat_chunk({"role": "assistant", "content": "Hi"}, None),
        _chat_chunk({}, "stop"),
        b"data: %s\n\n" % orjson.dumps({"id": "c1", "object": "chat.completion.chunk",
            "created": 1, "model": "m", "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
    ], b"data: [DONE]\n\n"),
    "/v1/messages": (b"text/event-stream", [
        _sse("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
            "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "Hi"}}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                               "usage": {"input_tokens": 3, "output_tokens": 2}}),
    ], _sse("message_stop", {"type": "message_stop"})),
    "/v1/responses": (b"text/event-stream", [
        _sse("response.created", {"type": "response.created", "response": RESPONSE}),
        _sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
    ], _sse("response.completed", {"type": "response.completed", "response": {
        **RESPONSE, "usage": {"input_tokens": 3, "output_tokens": 2}}})),
}  # fmt: skip
CHAT_FINAL: Final = NATIVE_FINAL.replace(
    b'"response":""', b'"message":{"role":"assistant","content":""}'
)
STREAMS["/api/chat"] = (b"application/x-ndjson", [
    orjson.dumps({"model": "m", "created_at": "2026-01-01T00:00:00Z",
                  "message": {"role": "assistant", "content": "Hi"}, "done": False}) + b"\n",
], CHAT_FINAL)  # fmt: skip


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class SlowEnd:
    """An upstream that streams each route's reply, final object in a chunk of its own,
    and ends the body LATE seconds after it, unless the proxy closed the connection by
    then (noted in `closed_early`). With `hold`, it waits that long before the final
    object too (and sends none if the proxy closed the connection by then). Other requests
    (the proxy's poller) get a 404."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.closed_early: list[bool] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await read_head(reader):
                method, path, _ = head.split(b" ", 2)
                stream = STREAMS.get(path.decode())
                if method != b"POST" or stream is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                media, pieces, final = stream
                writer.write(STARTED % media)
                for piece in pieces:
                    writer.write(_chunk(piece))
                    await writer.drain()
                if self.hold and await self._closed_within(reader, self.hold):
                    return
                writer.write(_chunk(final))
                await writer.drain()
                if await self._closed_within(reader, LATE):
                    return
                writer.write(b"0\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _closed_within(self, reader: asyncio.StreamReader, seconds: float) -> bool:
        """Whether the proxy closed the connection within `seconds` (noted either way)."""
        try:
            gone = await asyncio.wait_for(reader.read(1), seconds) == b""
        except TimeoutError:
            gone = False
        except ConnectionError:
            gone = True
        self.closed_early.append(gone)
        return gone


async def _start(
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    proxy_factory: MakeProxy,
    hold: float = 0.0,
) -> tuple[SlowEnd, Proxy, Spy]:
    upstream, spy = SlowEnd(hold), Spy()
    proxy = await proxy_factory(upstream=await raw_upstream(upstream.serve),
                                observers=(spy,))  # fmt: skip
    return upstream, proxy, spy


async def _read_then_close(proxy: Proxy, path: str, until: bytes) -> bytes:
    """A raw client: post, read until `until` has arrived, close (a FIN, as clients do)."""
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    body = b'{"model":"m","prompt":"hi","stream":true}'
    writer.write(
        b"POST %b HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (path.encode(), len(body), body)
    )
    got = b""
    while until not in got:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, f"the reply ended before {until!r}: {got!r}"
        got += data
    writer.close()
    await writer.wait_closed()
    return got


def _errors(proxy: Proxy) -> dict[str, float]:
    return {
        labels["kind"]: value
        for labels, value in samples(proxy, "ollama_tap_request_errors_total")
        if value
    }


def _requests(proxy: Proxy) -> float:
    return sum(
        value
        for labels, value in samples(proxy, "ollama_tap_requests_total")
        if labels["endpoint"] != "other"
    )


async def _all_ok(upstream: SlowEnd, proxy: Proxy, spy: Spy) -> None:
    ended = await spy.wait_ended(RUNS)
    assert [ex.outcome for ex in ended] == [Outcome.OK] * RUNS
    assert all(ex.status == 200 and ex.ended is not None for ex in ended)
    # Ollama still learns at once that nobody reads any more: its connection is closed.
    await eventually(lambda: len(upstream.closed_early) >= RUNS)
    assert upstream.closed_early == [True] * RUNS
    assert _requests(proxy) == RUNS and _errors(proxy) == {}


@pytest.mark.parametrize("path", sorted(STREAMS))
async def test_a_client_that_closes_after_the_final_object_is_ok(
    path: str,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    proxy_factory: MakeProxy,
) -> None:
    upstream, proxy, spy = await _start(raw_upstream, proxy_factory)
    final = STREAMS[path][2]
    for _ in range(RUNS):
        await _read_then_close(proxy, path, final)
    await _all_ok(upstream, proxy, spy)
    ex = spy.ended[0]
    assert ex.output_events == 1 and ex.usage is not None and ex.usage.eval_count == 2
    # The exchange ended when its last byte was written, not when the client left.
    assert ex.last_output is not None and ex.ended - ex.last_output < LATE


async def test_openai_sync_stream_closing_at_done_is_ok(
    raw_upstream: Callable[[RawHandler], Awaitable[str]], proxy_factory: MakeProxy
) -> None:
    upstream, proxy, spy = await _start(raw_upstream, proxy_factory)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0)

    def chat() -> str:
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [
            {"role": "user", "content": "hi"}
        ]
        stream = client.chat.completions.create(model="m", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    for _ in range(RUNS):
        assert await asyncio.to_thread(chat) == "Hi"
    client.close()
    await _all_ok(upstream, proxy, spy)


async def test_ollama_client_returning_at_done_is_ok(
    raw_upstream: Callable[[RawHandler], Awaitable[str]], proxy_factory: MakeProxy
) -> None:
    upstream, proxy, spy = await _start(raw_upstream, proxy_factory)
    client = ollama.Client(host=proxy.url)

    def generate() -> str:
        text = ""
        for part in client.generate("m", "hi", stream=True):
            text += part.response
            if part.done:
                return text  # the generator is dropped here, and its connection closed
        raise AssertionError("no done:true")

    for _ in range(RUNS):
        assert await asyncio.to_thread(generate) == "Hi"
    await _all_ok(upstream, proxy, spy)


@pytest.mark.parametrize("path", ["/api/generate", "/v1/chat/completions"])
async def test_a_client_that_closes_before_the_final_object_is_disconnected(
    path: str,
    raw_upstream: Callable[[RawHandler], Awaitable[str]],
    proxy_factory: MakeProxy,
) -> None:
    upstream, proxy, spy = await _start(raw_upstream, proxy_factory, hold=LATE)
    await _read_then_close(proxy, path, STREAMS[path][1][-1])
    [ex] = await spy.wait_ended()
    assert ex.outcome is Outcome.CLIENT_DISCONNECTED and ex.output_events == 1
    assert _errors(proxy) == {"client_disconnected": 1}
    await eventually(lambda: bool(upstream.closed_early))
    assert upstream.closed_early == [True]

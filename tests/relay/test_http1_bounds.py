"""What the HTTP/1 server does with bytes a client should not send: endless chunk framing and
trailers, garbage behind a request, a chunked body that breaks off, and the head-size bound
under pipelining (security-review D1, D3, D7, D8). Raw sockets, so that what is on the wire
is what is checked."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import orjson
import pytest
from structlog.testing import capture_logs

from ollama_tap.exchange import Outcome
from ollama_tap.relay.http1.bounds import MAX_FRAMING
from tests.conftest import MakeProxy, Proxy
from tests.support.spy import Spy
from tests.support.wire import get, read_response

CHUNKED = b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
FLOOD = 64 * 2**20
"""What the review sent as one trailer field."""


def flood(port: int, start: bytes, piece: bytes, limit: int, sent: list[int]) -> None:
    """From a thread, as a separate client: `start`, then `piece` again and again until the
    proxy cuts the connection or `limit` bytes went; `sent` gets the count."""
    total = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Small buffers on this side: what `sent` counts is near what the proxy read.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        sock.settimeout(10)
        try:
            sock.sendall(start)
            while total < limit:
                sock.sendall(piece)
                total += len(piece)
        except OSError:
            pass
    sent.append(total)


async def canary(proxy: Proxy, until: threading.Thread) -> list[float]:
    """`GET /api/version` on a new connection, one after another while `until` runs: how
    long each took to be answered."""
    took = []
    while until.is_alive() or not took:
        began = time.monotonic()
        reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
        writer.write(get("/api/version"))
        status, _, body = await asyncio.wait_for(read_response(reader), 30)
        took.append(time.monotonic() - began)
        assert status == "HTTP/1.1 200 OK" and "version" in orjson.loads(body)
        writer.close()
        await asyncio.sleep(0.02)
    return took


@pytest.mark.parametrize(
    ("start", "piece"),
    [
        (CHUNKED + b"0\r\nX-Trailer: ", b"t" * 16384),
        (CHUNKED + b"0\r\n", b"X-T: t\r\n" * 2048),
        (CHUNKED + b"5\r\nhello\r\n1;", b"e" * 16384),
    ],
    ids=["endless-trailer-field", "endless-trailer-fields", "endless-chunk-extension"],
)
async def test_endless_chunk_framing_is_cut_and_others_are_still_served(
    proxy_factory: MakeProxy, start: bytes, piece: bytes
) -> None:
    """64 MiB offered as one trailer (httptools grows it by concatenation: quadratic), as
    many trailer fields, or as one chunk extension: the connection is cut near
    MAX_FRAMING, and a client on another connection is answered meanwhile as ever."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    sent: list[int] = []
    flooder = threading.Thread(target=flood, args=(proxy.port, start, piece, FLOOD, sent))
    flooder.start()
    took = await canary(proxy, flooder)
    flooder.join()
    # Near the bound: MAX_FRAMING, the reads around it and the sockets' buffers.
    assert sent[0] < 16 * MAX_FRAMING < FLOOD
    # Answered within 100 ms when the machine is quiet; the bound leaves room for 2
    # shared cores (uncut, the proxy spent seconds on the flood and answered no one).
    median = sorted(took)[len(took) // 2]
    assert max(took) < 0.5, f"the canary took up to {max(took):.3f} s (median {median:.3f} s)"
    await ends.wait_ended(len(took) + 1)
    (ex,) = [ex for ex in ends.ended if ex.method == "POST"]
    assert ex.outcome is Outcome.CLIENT_DISCONNECTED  # the client's doing


async def test_garbage_behind_a_request_in_the_same_read_gets_its_answer_then_400(
    proxy_factory: MakeProxy,
) -> None:
    """The request before the bad bytes was sent upstream and executed: its reply is
    written, then a 400 that closes the connection (as nginx answers)."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(get("/api/tags") + b"\x00\x01garbage\r\n\r\n")  # one write
    status, _, body = await asyncio.wait_for(read_response(reader), 5)
    assert status == "HTTP/1.1 200 OK" and "models" in orjson.loads(body)
    status, headers, body = await asyncio.wait_for(read_response(reader), 5)
    assert status == "HTTP/1.1 400 Bad Request" and headers["connection"] == "close"
    assert "could not be parsed as HTTP/1.1" in orjson.loads(body)["error"]
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert [ex.outcome for ex in await ends.wait_ended()] == [Outcome.OK]
    writer.close()


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "trailer-later"])
async def test_a_chunked_body_that_does_not_parse_is_the_clients_error(
    proxy_factory: MakeProxy, split: bool
) -> None:
    """A bad trailer field after the exchange started: the connection is cut, and the
    exchange ends as the client's doing, logged calmly, not as a bug of the proxy's (an
    ERROR with a traceback and a recorded 500)."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    body = b"5\r\nhello\r\n0\r\nX Bad: y\r\n\r\n"
    with capture_logs() as logs:
        if split:
            writer.write(CHUNKED + body[:10])
            await asyncio.sleep(0.2)
            writer.write(body[10:])
        else:
            writer.write(CHUNKED + body)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        (ex,) = await ends.wait_ended()
    assert ex.outcome is Outcome.CLIENT_DISCONNECTED
    assert ex.status is None and ex.error_message is None
    assert [e for e in logs if e["log_level"] in ("error", "warning", "critical")] == []
    assert any(e["event"] == "front_unparseable" for e in logs)
    writer.close()


def send_then_read(port: int, data: bytes) -> bytes:
    """From a thread, as a blocking client does: everything sent (or as much as the proxy
    takes before it closes), then the answer read to the end."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(20)
        with contextlib.suppress(OSError):  # the proxy answered before taking it all
            sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


@pytest.mark.parametrize("rest", [0, 512 * 1024], ids=["head-alone", "with-a-body-behind"])
async def test_a_refused_head_is_answered_even_while_the_client_still_sends(
    proxy: Proxy, rest: int
) -> None:
    """A head past 128 KiB gets the 431 and the connection closes; bytes the client was
    still sending are read and dropped for a while first (nginx's lingering close, bounded
    by MAX_LINGER), so the close is no reset that takes the 431 away before the client
    reads it."""
    head = b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\n" + b"X-Pad: p\r\n" * 30000
    data = head + b"Content-Length: %d\r\n\r\n" % rest + b"x" * rest
    for _ in range(5):
        answer = await asyncio.to_thread(send_then_read, proxy.port, data)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"larger than 128 KiB" in answer

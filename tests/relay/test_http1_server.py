"""The front: the listening socket's own HTTP/1.1 server, the one transport of Ollama traffic.

Response heads as Ollama's, keep-alive, pipelining, HTTP/1.0, `Expect`, the hand-off of the
proxy's own paths to aiohttp (one request, then the connection closes), refusals, and
exchanges ended by the client's disconnect. Raw sockets are used so that what is on the wire
is what is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket

import aiohttp
import orjson
import pytest
from yarl import URL

from ollama_tap.exchange import Outcome
from ollama_tap.relay.http1.server import FrontConnection
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.serve_process import ADMIN_TOKEN
from tests.support.spy import Spy
from tests.support.wire import get, post, read_response

GENERATE = orjson.dumps({"model": "llama3.2", "prompt": "hi"})


async def connect(proxy: Proxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


def connections(proxy: Proxy) -> set[FrontConnection]:
    from ollama_tap.relay import FRONT

    return proxy.app[FRONT].connections


async def test_keep_alive_then_a_request_for_the_proxy_closes_its_connection(
    proxy_factory: MakeProxy,
) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(post("/api/generate", GENERATE))
    status, headers, body = await read_response(reader)
    assert status == "HTTP/1.1 200 OK"
    assert headers["transfer-encoding"] == "chunked"
    assert body.count(b"\n") == 6 and b'"done":true' in body
    assert len(connections(proxy)) == 1  # served by the front
    writer.write(post("/api/generate", GENERATE))  # the same connection, kept alive
    assert (await read_response(reader))[0] == "HTTP/1.1 200 OK"
    writer.write(get("/_tap/healthz"))  # aiohttp's route: the connection is handed over
    status, headers, body = await read_response(reader)
    assert status == "HTTP/1.1 200 OK" and orjson.loads(body) == {"upstream": "up"}
    assert headers["connection"] == "close"  # aiohttp never sees a second request on it
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert connections(proxy) == set()
    writer.close()


async def test_a_keep_alive_client_is_relayed_by_the_front_after_a_tap_request(
    proxy_factory: MakeProxy,
) -> None:
    """A client's pool reconnects after the closed /_tap/ connection: its next Ollama
    request is relayed (and recorded) as any other."""
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    async with aiohttp.ClientSession() as s:
        for path in ("/api/tags", "/_tap/healthz", "/api/tags", "/metrics", "/api/version"):
            async with s.get(proxy.url + path) as resp:
                assert resp.status == 200
                await resp.read()
    assert [ex.path for ex in await spy.wait_ended(3)] == ["/api/tags", "/api/tags", "/api/version"]


@pytest.mark.parametrize(
    ("request_bytes", "status", "body_has"),
    [
        (get("/metrics"), "200", b"ollama_tap_requests_in_flight"),
        (get("/_tap/api/records", f"Authorization: Bearer {ADMIN_TOKEN}"), "200", b'"records"'),
        (get("/_tap/api/records"), "401", b"token"),
        (get("/_tap/healthz", version="1.0"), "200", b'"upstream"'),
    ],
    ids=["metrics", "tap-api", "tap-unauthorized", "tap-http10"],
)
async def test_what_aiohttp_answers(
    proxy_factory: MakeProxy, request_bytes: bytes, status: str, body_has: bytes
) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(request_bytes)
    line, headers, body = await read_response(reader)
    assert line.split()[1] == status
    assert body_has in body and headers["connection"] == "close"
    assert connections(proxy) == set()  # the connection was aiohttp's, and is closed
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


@pytest.mark.parametrize(
    ("request_bytes", "status", "body_has", "kept"),
    [
        (get("/api/tags", version="1.0"), "200", b'"models"', False),
        (get("/api/tags", "Connection: keep-alive", version="1.0"), "200", b'"models"', True),
        (post("/api/generate", GENERATE, "Expect: 100-continue"), "200", b'"done":true', True),
        (get("/api/tags").replace(b"localhost:11435", b"evil.example"), "403", b"", False),
    ],
    ids=["http10", "http10-keep-alive", "expect", "rebinding"],
)
async def test_what_the_front_answers_itself(
    proxy_factory: MakeProxy, request_bytes: bytes, status: str, body_has: bytes, kept: bool
) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(request_bytes)
    line, _, body = await read_response(reader)
    if line.endswith("100 Continue"):
        line, _, body = await read_response(reader)
    assert line.split()[1] == status
    assert body_has in body
    if kept:
        writer.write(get("/api/version"))
        assert (await read_response(reader))[0].split()[1] == "200"
    else:
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_pipelined_requests_are_answered_in_order(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    first = orjson.dumps({"model": "llama3.2", "prompt": "one"})
    writer.write(post("/api/generate", first) + get("/api/tags") + get("/api/version"))
    results = [await read_response(reader) for _ in range(3)]
    assert [r[0] for r in results] == ["HTTP/1.1 200 OK"] * 3
    assert b'"done":true' in results[0][2]
    assert "models" in orjson.loads(results[1][2])
    assert "version" in orjson.loads(results[2][2])
    writer.close()


async def test_pipelined_request_for_aiohttp_is_refused_clearly(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(get("/api/tags") + get("/_tap/healthz"))
    assert (await read_response(reader))[0] == "HTTP/1.1 200 OK"
    status, headers, body = await read_response(reader)
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["connection"] == "close"
    assert "pipelined" in orjson.loads(body)["error"]
    assert await reader.read() == b""  # and the connection is closed
    writer.close()


async def test_response_heads_are_ollamas(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    """The front writes heads itself: they are what Ollama (the fake) answered, minus the
    clock, lengths that vary with its measured durations, and the order of the fields."""
    cases = [
        post("/api/generate", GENERATE),
        post("/api/generate", orjson.dumps({"model": "llama3.2", "prompt": "x", "stream": False})),
        get("/api/tags"),
        get("/api/tags", "Connection: close"),
        b"HEAD / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        get("/nope"),
    ]
    proxy = await proxy_factory()
    fake = URL(fake_ollama.url)
    heads: dict[str, list[str]] = {"direct": [], "proxied": []}
    for where, (host, port) in {
        "direct": (fake.host, fake.port),
        "proxied": (proxy.host, proxy.port),
    }.items():
        for case in cases:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(case)
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            head = re.sub(r"Date: [^\r]*", "Date: -", head.removesuffix("\r\n\r\n"))
            head = re.sub(r"Content-Length: \d+", "Content-Length: n", head)
            status, *fields = head.split("\r\n")
            heads[where].append("\r\n".join([status, *sorted(fields)]))  # hop-by-hop move
            writer.close()
    assert heads["proxied"] == heads["direct"]


async def test_client_leaving_during_prefill_cancels_the_exchange(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    """Nothing has been written yet when the client goes: the front still notices at once
    and the upstream connection is closed (Ollama stops), as aiohttp's handler cancellation
    does."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    fake_ollama.script = Script(prefill_delay=5.0)
    _, writer = await connect(proxy)
    writer.write(post("/api/generate", GENERATE))
    await asyncio.sleep(0.3)
    writer.close()
    assert [ex.outcome for ex in await ends.wait_ended()] == [Outcome.CLIENT_DISCONNECTED]


async def test_chunked_upload_and_early_answer_keep_the_connection(
    proxy_factory: MakeProxy,
) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    body = (
        b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in (GENERATE[:5], GENERATE[5:])) + b"0\r\n\r\n"
    )
    head = b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
    writer.write(head + body)
    status, _, reply = await read_response(reader)
    assert status == "HTTP/1.1 200 OK" and b'"done":true' in reply
    writer.write(get("/api/version"))
    assert (await read_response(reader))[0] == "HTTP/1.1 200 OK"
    writer.close()


async def test_garbage_goes_to_aiohttp_which_answers_400(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 not http\r\n\r\n")
    status, _, _ = await read_response(reader)
    assert status.split()[1] == "400"
    writer.close()


SLOW = post("/api/generate", orjson.dumps({"model": "llama3.2", "prompt": "slow", "stream": False}))


async def test_a_queued_request_keeps_its_place_before_a_hand_off(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    """A (slow) streams, B (the front's) waits behind it, C (aiohttp's) arrives last: the
    answers come A, B, C, each in its own slot."""
    proxy = await proxy_factory()
    fake_ollama.script = Script(prefill_delay=0.5)
    reader, writer = await connect(proxy)
    writer.write(SLOW)
    await asyncio.sleep(0.1)
    writer.write(get("/api/version"))
    await asyncio.sleep(0.1)
    writer.write(get("/_tap/healthz"))
    first, second, third = [await asyncio.wait_for(read_response(reader), 5) for _ in range(3)]
    assert b'"done":true' in first[2]
    assert "version" in orjson.loads(second[2])
    assert orjson.loads(third[2]) == {"upstream": "up"}
    writer.close()


async def test_garbage_behind_a_running_exchange_waits_for_it(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    fake_ollama.script = Script(prefill_delay=0.4)
    reader, writer = await connect(proxy)
    writer.write(SLOW)
    await asyncio.sleep(0.1)
    writer.write(b"GARBAGE \x01\x02 nonsense\r\n\r\n")
    status, _, body = await asyncio.wait_for(read_response(reader), 5)
    assert status == "HTTP/1.1 200 OK" and b'"done":true' in body
    assert (await asyncio.wait_for(read_response(reader), 5))[0].split()[1] == "400"
    assert [ex.outcome for ex in ends.ended] == [Outcome.OK]
    writer.close()


async def test_a_double_slash_target_is_relayed_as_sent(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    """yarl would read "//api/tags" as a host and a path; the target must pass untouched."""
    proxy = await proxy_factory()
    seen = []
    upstream = URL(fake_ollama.url)
    for host, port in ((upstream.host, upstream.port), (proxy.host, proxy.port)):
        before = len(fake_ollama.received)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(get("//api/tags?x=1").replace(b"localhost:11435", b"localhost"))
        await read_response(reader)
        writer.close()
        # Not the poller's reads meanwhile (/api/tags among them): those carry no query.
        seen += [r.path_qs for r in fake_ollama.received[before:] if "x=1" in r.path_qs]
    assert len(seen) == 2 and seen[0] == seen[1], seen


async def push_until_refused(writer: asyncio.StreamWriter, limit: int, wait: float) -> int:
    """Write 64 KiB pieces until the proxy stops taking them (or `limit` bytes went)."""
    sent = 0
    with contextlib.suppress(ConnectionError, TimeoutError):
        while sent < limit:
            writer.write(b"a" * 65536)
            await asyncio.wait_for(writer.drain(), wait)
            sent += 65536
            await asyncio.sleep(0)
    return sent


@pytest.mark.parametrize("pipelined", [False, True])
async def test_an_endless_head_is_cut_off(proxy_factory: MakeProxy, pipelined: bool) -> None:
    """llhttp buffers a header until it ends; the front stops reading one past MAX_HEAD
    (aiohttp answers a fresh one; one begun in the read that ended another is cut)."""
    from ollama_tap.relay.http1.bounds import MAX_HEAD

    proxy = await proxy_factory()
    _, writer = await connect(proxy)
    start = (get("/api/version") if pipelined else b"") + b"GET /api/tags HTTP/1.1\r\nX-Big: "
    writer.write(start)
    assert await push_until_refused(writer, 64 * MAX_HEAD, 5) < 64 * MAX_HEAD
    await asyncio.sleep(0.1)
    assert connections(proxy) == set()
    writer.close()


async def test_a_deferred_hand_off_stops_reading_the_client(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory()
    fake_ollama.script = Script(prefill_delay=2.0)
    _, writer = await connect(proxy)
    writer.write(SLOW)
    await asyncio.sleep(0.1)
    huge = post("/_tap/anything", b"").replace(b"Content-Length: 0", b"Content-Length: 999999999")
    writer.write(huge)
    assert await push_until_refused(writer, 256 * 2**20, 0.5) < 256 * 2**20
    (conn,) = connections(proxy)
    assert conn.pending == "hand-off" and conn.flow.reading_paused
    assert sum(map(len, conn.raw)) < 8 * 2**20
    writer.transport.abort()


async def test_idle_and_half_received_connections_close_at_shutdown(
    proxy_factory: MakeProxy,
) -> None:
    from ollama_tap.relay import FRONT

    proxy = await proxy_factory()
    idle_reader, idle = await connect(proxy)
    idle.write(get("/api/version"))
    await read_response(idle_reader)
    half_reader, half = await connect(proxy)
    half.write(b"GET /api/tags HTTP/1.1\r\nHo")
    await asyncio.sleep(0.1)
    proxy.app[FRONT].clients.close_idle()
    assert await asyncio.wait_for(idle_reader.read(), 2) == b""
    assert await asyncio.wait_for(half_reader.read(), 2) == b""


async def test_many_pipelined_requests_in_one_read_are_not_a_large_head(
    proxy_factory: MakeProxy,
) -> None:
    """The head-size bound counts the head, not the requests that came before it in the
    same read (a read of several hundred KiB is ordinary under load)."""
    from ollama_tap.relay import FRONT
    from ollama_tap.relay.http1.bounds import MAX_HEAD

    proxy = await proxy_factory()
    requests = get("/api/version") * (2 * MAX_HEAD // len(get("/api/version")))

    class Transport(asyncio.Transport):
        aborted = False

        def get_extra_info(self, name: str, default: object = None) -> object:
            return default

        def abort(self) -> None:
            self.aborted = True

        def is_closing(self) -> bool:
            return self.aborted

        def pause_reading(self) -> None: ...

        def resume_reading(self) -> None: ...

        def write(self, data: bytes | bytearray | memoryview) -> None: ...

    transport = Transport()
    conn = proxy.app[FRONT]()
    conn.connection_made(transport)
    conn.data_received(requests + b"GET /api/tags HTTP/1.1\r\nHost: loc")  # one read
    assert not transport.aborted
    assert conn.bounds.head_size < MAX_HEAD
    assert len(conn.queue) == requests.count(b"GET ") - 1
    assert conn.task is not None
    conn.task.cancel()
    conn.connection_lost(None)


async def test_a_pipelined_request_is_timed_from_its_arrival(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    """The client-side clock starts when the request head arrives: a request pipelined
    behind a slow one waits for it, and its time to first token says so (it is what its
    client saw), instead of starting when the front got round to it."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    fake_ollama.script = Script(prefill_delay=0.3)
    reader, writer = await connect(proxy)
    second = orjson.dumps({"model": "llama3.2", "prompt": "two"})
    writer.write(post("/api/generate", GENERATE) + post("/api/generate", second))
    for _ in range(2):
        assert (await read_response(reader))[0] == "HTTP/1.1 200 OK"
    writer.close()
    first, later = ends.ended
    assert first.ended is not None and later.ttft is not None
    assert later.started < first.ended  # its clock ran while it waited
    assert later.ttft >= 0.55  # both prefills of 0.3 s
    # The wall clock (the record's start) tells the same moment, not the 0.3 s later one.
    apart = (later.started_wall - first.started_wall) - (later.started - first.started)
    assert abs(apart) < 0.1


async def test_client_connections_use_tcp_keepalive(proxy_factory: MakeProxy) -> None:
    """As with aiohttp's server, a client that vanished without a word is found out by TCP
    (the front sets it on the listening socket, which accepted connections inherit)."""
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(get("/api/version"))
    await read_response(reader)
    [conn] = connections(proxy)
    sock = conn.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
    writer.close()


CHUNKED = "Transfer-Encoding: chunked"


def _head(first: str, *fields: str) -> bytes:
    return (first + "\r\n" + "".join(f + "\r\n" for f in fields) + "\r\n").encode()


@pytest.mark.parametrize(
    ("request_bytes", "status", "says"),
    [
        (
            _head("POST /api/chat HTTP/1.1", "Host: h", "Content-Length: 2", "Content-Length: 3"),
            400,
            "Content-Length",
        ),
        (
            _head("POST /api/chat HTTP/1.1", "Host: h", "Content-Length: 2", CHUNKED),
            400,
            "Transfer-Encoding",
        ),
        (_head("POST /api/chat HTTP/1.1", "Host: h", "Transfer-Encoding: gzip, chunked"),
         501, "gzip"),
        (_head("POST /api/chat HTTP/1.0", CHUNKED), 400, "ambiguous"),
        (_head("GET /api/tags HTTP/1.1"), 400, "Host"),
        (_head("GET /api/tags HTTP/1.1", "Host: a", "Host: b"), 400, "Host"),
        (_head("GET /api/tags HTTP/1.1", "Host: h", "Expect: something"), 417, "Expect"),
        (_head("CONNECT ollama:443 HTTP/1.1", "Host: ollama:443"), 405, "CONNECT"),
        (_head("OPTIONS * HTTP/1.1", "Host: h"), 400, "not a path"),
        (_head("GET /" + "a" * 9000 + " HTTP/1.1", "Host: h"), 414, "URL"),
        (_head("GET /api/tags HTTP/2.0", "Host: h"), 505, "HTTP/2.0"),
        (_head("POST /v1/chat/completions HTTP/1.1", "Host: h", "Expect: x"), 417, "openai"),
    ],
    ids=[
        "two-lengths", "length-and-chunked", "unknown-coding", "chunked-http10", "no-host",
        "two-hosts", "expectation", "connect", "asterisk", "long-target", "http2", "openai-shape",
    ],
)  # fmt: skip
async def test_what_cannot_be_relayed_with_one_framing_is_refused_in_the_routes_shape(
    proxy_factory: MakeProxy, request_bytes: bytes, status: int, says: str
) -> None:
    """The proxy's own error (Ollama's shape, or OpenAI's on /v1/), naming the fix, and the
    connection closes: what follows such a request cannot be trusted. Nothing goes upstream."""
    spy = Spy()
    proxy = await proxy_factory(observers=(spy,))
    reader, writer = await connect(proxy)
    writer.write(request_bytes)
    line, headers, body = await asyncio.wait_for(read_response(reader), 5)
    # HTTP/1.0 closes unless told otherwise; 1.1 is told.
    assert line.split()[1] == str(status) and headers.get("connection", "close") == "close"
    error = orjson.loads(body)["error"]
    if says == "openai":
        assert error["message"].startswith("ollama-tap: ")
    else:
        assert error.startswith("ollama-tap: ") and says in error
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert spy.ended == []
    writer.close()


async def test_an_absolute_target_and_an_upgrade_are_relayed_as_plain_requests(
    proxy_factory: MakeProxy,
) -> None:
    """A client that takes the proxy for a forward proxy sends absolute URIs (RFC 9112
    §3.2.2): relayed by their path. One that asks to upgrade gets the plain answer Ollama
    gives, and the connection ends with it (llhttp parses nothing after an upgrade)."""
    proxy = await proxy_factory()
    reader, writer = await connect(proxy)
    writer.write(get("http://ollama.example:11434/api/tags"))
    status, _, body = await read_response(reader)
    assert status == "HTTP/1.1 200 OK" and "models" in orjson.loads(body)
    writer.write(get("/api/version", "Connection: Upgrade\r\nUpgrade: websocket"))
    status, headers, body = await read_response(reader)
    assert status == "HTTP/1.1 200 OK" and "version" in orjson.loads(body)
    assert headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()

"""Client connections as a whole (security-review D9): the soft limit on open files raised
to the hard one at start, idle connections past the cap closed so that new clients are
served, and a client that goes silent before or inside its request cut on either path."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs
from yarl import URL

from ollama_tap.exchange import Outcome
from ollama_tap.relay.http1 import clients, request
from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama
from tests.support.serve_process import serve
from tests.support.spy import Spy
from tests.support.wire import get, read_response


def open_files(pid: int) -> list[str]:
    """The soft and hard limit on open files of a process, as /proc shows them."""
    (line,) = [
        line
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
        if line.startswith("Max open files")
    ]
    return line.split()[3:5]


async def test_serve_raises_the_soft_limit_on_open_files(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    """As Go's runtime does for Ollama: 1,024 is a few hundred idle clients."""
    proc, _ = await serve(fake_ollama.url, tmp_path / "r.db", nofile=(256, 4096))
    try:
        assert open_files(proc.pid) == ["4096", "4096"]
    finally:
        proc.terminate()
        await proc.wait()


async def test_idle_connections_past_the_cap_make_room_for_new_clients(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    """With 256 descriptors, 300 clients that got their answer and would keep their
    connection open: the longest idle are closed, and a new client is served. (Half of
    them asked for /_tap/, whose connection closes with its answer.)"""
    db = tmp_path / "r.db"
    proc, url = await serve(fake_ollama.url, db, nofile=(256, 256))
    port = URL(url).port
    held = []
    try:
        for i in range(300):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get("/api/version" if i % 2 else "/_tap/healthz"))
            assert (await asyncio.wait_for(read_response(reader), 10))[0] == "HTTP/1.1 200 OK"
            held.append((reader, writer))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/api/version"))
        assert (await asyncio.wait_for(read_response(reader), 10))[0] == "HTTP/1.1 200 OK"
        for older in (0, 1):  # /_tap/'s closed with its answer; the front's oldest went
            assert await asyncio.wait_for(held[older][0].read(), 5) == b""
        with pytest.raises(TimeoutError):  # the newest stay
            await asyncio.wait_for(held[-1][0].read(1), 0.2)
    finally:
        for _, w in held:
            w.close()
        proc.terminate()
        await proc.wait()


@pytest.mark.interpreted
@pytest.mark.parametrize("first", [b"", get("/api/version")], ids=["fresh", "after-a-request"])
async def test_a_dripped_head_is_cut(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch, first: bytes
) -> None:
    """A head sent a byte at a time is cut KEEPALIVE_SECONDS after the connection went
    idle, on a fresh connection as on one kept alive."""
    monkeypatch.setattr(clients, "KEEPALIVE_SECONDS", 1.0)
    proxy = await proxy_factory()
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    if first:
        writer.write(first)
        await read_response(reader)
    loop = asyncio.get_running_loop()
    began = loop.time()
    closed = asyncio.ensure_future(reader.read())
    for byte in b"GET /api/tags HTTP/1.1\r\nX-Slow: " + b"s" * 100:
        if closed.done():
            break
        writer.write(bytes([byte]))
        await asyncio.wait([closed], timeout=0.1)
    assert closed.done() and closed.result() == b"", "the dripped head was never cut"
    assert loop.time() - began < 3
    writer.close()


@pytest.mark.interpreted
@pytest.mark.parametrize(
    "body",
    [b"Content-Length: 100\r\n\r\n0123456789", b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"],
    ids=["stalled-body", "stalled-chunk"],
)
async def test_a_stalled_body_is_cut(
    proxy_factory: MakeProxy, monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    """A body that stops coming (after the proxy met `Expect: 100-continue`): the
    connection is cut and the exchange ends as the client's doing, instead of holding two
    sockets for ever."""
    monkeypatch.setattr(request, "STALL_SECONDS", 1.0)
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    head = b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
    writer.write(head + body)
    assert (
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2) == b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    assert await asyncio.wait_for(reader.read(), 3) == b""
    assert [ex.outcome for ex in await ends.wait_ended()] == [Outcome.CLIENT_DISCONNECTED]
    writer.close()


@pytest.mark.interpreted
async def test_a_trailer_that_does_not_parse_does_not_hold_the_exchange(
    proxy_factory: MakeProxy,
) -> None:
    """A trailer llhttp refuses after the exchange began cuts the connection, and the
    exchange ends as the client's doing."""
    ends = Spy()
    proxy = await proxy_factory(observers=(ends,))
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    writer.write(b"5\r\nhello\r\n")
    await asyncio.sleep(0.2)
    writer.write(b"0\r\nX Bad: y\r\n\r\n")
    await asyncio.wait_for(reader.read(), 3)
    assert [ex.outcome for ex in await ends.wait_ended(1)] == [Outcome.CLIENT_DISCONNECTED]
    writer.close()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closed (or reset) this connection within `seconds`."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_busy_connections_past_the_cap_refuse_the_new_counted_and_serve_once_freed(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    """With 256 descriptors (a cap of 96 clients), 130 uploads that stall after their head,
    each an exchange holding its client's socket and one to Ollama: the connections past the
    cap are closed as they come (none is idle to close instead), counted and logged once,
    rather than the process running out of descriptors, where uvloop's libuv closes what it
    cannot accept without a word. Once the uploads go, new clients are served."""
    proc, url = await serve(fake_ollama.url, tmp_path / "r.db", nofile=(256, 256), capture=True)
    port = URL(url).port
    head = (
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n"
        b'{"model": "llama3.2",'
    )
    held = []
    try:
        for _ in range(130):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            held.append((reader, writer))
        # The refused ones end at once, the others wait for a body: all watched together.
        ended = await asyncio.gather(*(closed_within(reader, 2.0) for reader, _ in held))
        assert sum(ended) >= 130 - 96
        for _, writer in held:
            writer.close()
        async with aiohttp.ClientSession() as s:
            for _ in range(100):  # until the uploads' exchanges have ended
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(f"{url}/api/version") as resp:
                        if resp.status == 200:
                            break
                await asyncio.sleep(0.1)
            async with s.get(f"{url}/metrics") as resp:
                metrics = await resp.text()
        counted = [line for line in metrics.splitlines() if line.startswith(
            'ollama_tap_connections_refused_total{reason="fd_cap"}')]  # fmt: skip
        assert counted and float(counted[0].split()[-1]) >= 130 - 96
    finally:
        for _, w in held:
            w.close()
        proc.terminate()
        await proc.wait()
    assert proc.stderr is not None
    log = (await proc.stderr.read()).decode()
    assert log.count("connections_refused") == 1, log


def test_a_failed_accept_is_counted_and_logged_once_a_minute() -> None:
    """asyncio's own loop reports each failed accept as an ERROR, at every retry: counted
    and logged at most once a minute instead; anything else goes to the handler before."""
    front = clients.Clients()
    seen: list[dict[str, object]] = []
    handle = clients.accept_failures(front, lambda _, context: seen.append(context))
    loop = asyncio.new_event_loop()
    try:
        emfile = OSError(errno.EMFILE, "Too many open files")
        with capture_logs() as lines:
            for _ in range(5):
                handle(
                    loop, {"message": "socket.accept() out of system resource", "exception": emfile}
                )
        handle(loop, {"message": "something else", "exception": ValueError()})
    finally:
        loop.close()
    assert front.refused == {clients.FD_CAP: 0, clients.ACCEPT_FAILED: 5}
    assert [(line["event"], line["count"]) for line in lines] == [("connections_refused", 1)]
    assert [context["message"] for context in seen] == ["something else"]

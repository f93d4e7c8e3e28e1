"""Clients that go away, upstreams that go away, and a proxy told to stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ollama_tap.exchange import Outcome
from ollama_tap.relay import FRONT
from ollama_tap.relay.headers import UpstreamTarget
from ollama_tap.relay.http1 import server
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.request import FrontRequest
from tests.conftest import MakeProxy
from tests.support.serve_process import serve
from tests.support.spy import Spy


class SlowUpstream:
    """An upstream that streams NDJSON slowly and notes when its client went away."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.lines_written = 0

    async def generate(self, request: web.Request) -> web.StreamResponse:
        count = int((await request.json()).get("lines", 1000))
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        try:
            for i in range(count):
                line = {"model": "m", "response": f"t{i}", "done": False}
                await resp.write(orjson.dumps(line) + b"\n")
                self.lines_written += 1
                await asyncio.sleep(0.02)
        except (ConnectionResetError, asyncio.CancelledError):
            self.gone.set()
            raise
        return resp

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/generate", self.generate)
        return app


@pytest.fixture
async def slow_upstream(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> AsyncIterator[tuple[SlowUpstream, str]]:
    up = SlowUpstream()
    server = await aiohttp_server(up.app())
    return up, str(server.make_url("")).rstrip("/")


@pytest.mark.parametrize("cancellation", [True, False], ids=["CancelledError", "ConnectionReset"])
async def test_client_disconnect_closes_upstream_and_is_recorded(
    cancellation: bool, proxy_factory: MakeProxy, slow_upstream: tuple[SlowUpstream, str]
) -> None:
    up, url = slow_upstream
    spy = Spy()
    proxy = await proxy_factory(upstream=url, observers=(spy,), handler_cancellation=cancellation)
    async with aiohttp.ClientSession() as s:
        resp = await s.post(proxy.url + "/api/generate", json={"model": "m", "prompt": "x"})
        await resp.content.readline()
        await resp.content.readline()
        resp.connection.transport.abort()  # type: ignore[union-attr]
        resp.close()
    await asyncio.wait_for(up.gone.wait(), 5)
    written = up.lines_written
    await asyncio.sleep(0.2)
    assert up.lines_written == written, "Ollama kept generating for a client that left"
    assert [ex.outcome for ex in await spy.wait_ended()] == [Outcome.CLIENT_DISCONNECTED]


async def test_sigterm_lets_in_flight_streams_finish_then_exits_0(
    slow_upstream: tuple[SlowUpstream, str], tmp_path: Any
) -> None:
    _, upstream = slow_upstream
    proc, url = await serve(upstream, tmp_path / "r.db", "--shutdown-grace", "30", capture=True)
    async with aiohttp.ClientSession() as s:
        resp = await s.post(f"{url}/api/generate", json={"model": "m", "prompt": "x", "lines": 60})
        await resp.content.readline()
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        with pytest.raises(aiohttp.ClientConnectionError):
            await s.get(f"{url}/api/tags")
        lines = 1
        async for _ in resp.content:
            lines += 1
    assert lines == 60, "the in-flight stream was cut instead of finishing"
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_sigterm_past_the_grace_period_cuts_streams_and_exits_0(
    slow_upstream: tuple[SlowUpstream, str], tmp_path: Any
) -> None:
    _, upstream = slow_upstream
    proc, url = await serve(upstream, tmp_path / "r.db", "--shutdown-grace", "1", capture=True)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as s:
        resp = await s.post(f"{url}/api/generate", json={"model": "m", "prompt": "x"})
        await resp.content.readline()
        proc.send_signal(signal.SIGTERM)
        sent = loop.time()
        with pytest.raises(aiohttp.ClientPayloadError):
            async for _ in resp.content:
                pass
        cut = loop.time() - sent
    # The grace period, not twice it (aiohttp's own shutdown waits its timeout twice).
    assert 0.8 < cut < 1.9, f"stream cut {cut:.2f} s after SIGTERM with a 1 s grace"
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    _, stderr = await proc.communicate()
    assert b'"outcome": "shutdown"' in stderr


async def test_serve_speaks_tls_with_a_cert_and_key(
    slow_upstream: tuple[SlowUpstream, str], tmp_path: Any
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await made.wait() == 0
    _, upstream = slow_upstream
    proc, url = await serve(
        upstream, tmp_path / "r.db", "--tls-cert", str(cert), "--tls-key", str(key), tls=True
    )
    try:
        assert url.startswith("https://")
        async with aiohttp.ClientSession() as s:
            async with s.post(
                url + "/api/generate", json={"model": "m", "lines": 3}, ssl=False
            ) as resp:
                assert resp.status == 200
                assert len([line async for line in resp.content]) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0


@pytest.mark.interpreted
async def test_a_request_sent_on_arrival_is_recorded_and_stopped_when_its_client_left(
    proxy_factory: MakeProxy,
    slow_upstream: tuple[SlowUpstream, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The front sends a request that arrived whole upstream at once, before its exchange's
    task has run (`send_on_arrival`). A client gone by the time that task runs still gets its
    exchange recorded (`client_disconnected`), and Ollama's connection is closed."""
    up, url = slow_upstream
    spy = Spy()
    proxy = await proxy_factory(upstream=url, observers=(spy,))
    async with aiohttp.ClientSession() as s:  # leaves an idle upstream connection
        async with s.post(proxy.url + "/api/generate", json={"lines": 1}) as resp:
            await resp.read()
    sent: list[bool] = []
    send = server.send_on_arrival

    def send_then_lose(pool: UpstreamPool, target: UpstreamTarget, request: FrontRequest) -> bool:
        sent.append(send(pool, target, request) and request.sent is not None)
        (conn,) = [c for c in proxy.app[FRONT].connections if c.fresh is request]
        conn.transport.abort()
        return sent[-1]

    monkeypatch.setattr(server, "send_on_arrival", send_then_lose)
    _, writer = await asyncio.open_connection(proxy.host, proxy.port)
    body = orjson.dumps({"model": "m", "prompt": "x"})
    writer.write(
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%b"
        % (len(body), body)
    )
    await asyncio.wait_for(up.gone.wait(), 5)
    assert sent == [True]
    # The first is the warm-up (this upstream sends no final object: `incomplete`).
    assert [ex.outcome for ex in await spy.wait_ended(2)][1:] == [Outcome.CLIENT_DISCONNECTED]
    writer.close()

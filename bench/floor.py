"""A reference point for bench/overhead.py, not a product: the least a Python relay of
Ollama streams can do, on the same stack as ollama-tap (uvloop, httptools, orjson).

Per request it parses the head, sends it upstream on a pooled keep-alive connection from
the callback it arrived in, and parses the body as JSON; per reply it re-frames the body
chunked and parses each NDJSON line after writing it. No Exchange, hooks, metrics,
recording, timeouts, back-pressure, hand-offs or error handling: what ollama-tap costs
beyond this figure is what those cost. Only for the benchmark's own upstream.

With BUSY (`US` or `US:after`) each request also costs US microseconds of Python work,
right after it is sent upstream or right after its first token is written: what a given
amount of per-request bookkeeping costs in time to first token, and whether it matters
when it runs.

    python bench/floor.py PORT UPSTREAM_PORT [BUSY]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httptools
import orjson
import uvloop

_HOP: frozenset[bytes] = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"host"}
)
_IDLE: list[Upstream] = []
_BUSY_US, _, _WHEN = (sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else "0").partition(":")
_BUSY = float(_BUSY_US) / 1e6
_AFTER = _WHEN == "after"


def _busy() -> None:
    """Allocation-heavy work (dicts and lists, as bookkeeping is) for _BUSY seconds."""
    end = time.perf_counter() + _BUSY
    while time.perf_counter() < end:
        _ = [{"n": i, "s": str(i), "l": [i]} for i in range(20)]


def _kept(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    return [k + b": " + v for k, v in headers if k.lower() not in _HOP]


class Upstream(asyncio.Protocol):
    """One pooled connection to the upstream, relaying one reply at a time."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, client: Client, data: bytes) -> None:
        self.client, self.parser = client, httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.head, self.head_sent, self.lines = b"", False, b""
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.chunked = not any(k.lower() == b"content-length" for k, _ in self.headers)
        status = b"HTTP/1.1 %d OK" % self.parser.get_status_code()
        framing = [b"Transfer-Encoding: chunked"] if self.chunked else []
        self.head = b"\r\n".join([status, *_kept(self.headers), *framing, b"", b""])

    def on_body(self, body: bytes) -> None:
        assert self.client is not None
        frame = b"%x\r\n%b\r\n" % (len(body), body) if self.chunked else body
        if not self.head_sent and _BUSY and _AFTER:
            asyncio.get_running_loop().call_soon(_busy)
        self.client.transport.write(frame if self.head_sent else self.head + frame)
        self.head_sent = True
        at = time.monotonic()
        *lines, self.lines = (self.lines + body).split(b"\n")
        for line in lines:
            self.client.outputs.append((at, orjson.loads(line).get("response")))

    def on_message_complete(self) -> None:
        assert self.client is not None
        if not self.head_sent:
            self.client.transport.write(self.head)
        elif self.chunked:
            self.client.transport.write(b"0\r\n\r\n")
        self.client = None
        _IDLE.append(self)


class Client(asyncio.Protocol):
    """One client connection; requests answered one at a time."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.parser = httptools.HttpRequestParser(self)
        self.outputs: list[tuple[float, Any]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        line = self.parser.get_method() + b" " + self.url + b" HTTP/1.1"
        host = b"Host: 127.0.0.1:%d" % self.upstream_port
        data = b"\r\n".join([line, host, *_kept(self.headers), b"", b""]) + b"".join(self.body)
        if _IDLE:
            _IDLE.pop().send(self, data)
        else:
            self.connecting = asyncio.ensure_future(self._connect(data))
        if _BUSY and not _AFTER:
            asyncio.get_running_loop().call_soon(_busy)
        self.request = orjson.loads(b"".join(self.body)) if self.body else None

    async def _connect(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(Upstream, "127.0.0.1", self.upstream_port)
        upstream.send(self, data)


async def main(port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: Client(upstream_port), "127.0.0.1", port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2])))

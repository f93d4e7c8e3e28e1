"""A TCP forwarder in front of a server that keeps what the server sent each connection:
the bytes a client got at the wire, whatever HTTP library it uses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tests.support.wire import read_response


class WireTap:
    """Listens on a loopback port and forwards each connection to `port`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[bytearray] = []
        """Per connection, in the order they were opened: every byte the server sent."""
        self.server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self) -> WireTap:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        got = bytearray()
        self.received.append(got)
        pipes = [
            asyncio.ensure_future(_pipe(reader, up_writer, None)),
            asyncio.ensure_future(_pipe(up_reader, writer, got)),
        ]
        self._pipes.update(pipes)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for pipe in pipes:
            pipe.cancel()
        for w in (writer, up_writer):
            w.close()

    async def bodies(self) -> list[bytes]:
        """Every response body the server sent (de-chunked), connection by connection."""
        out: list[bytes] = []
        for got in self.received:
            stream = asyncio.StreamReader()
            stream.feed_data(bytes(got))
            stream.feed_eof()
            while not stream.at_eof():
                with contextlib.suppress(asyncio.IncompleteReadError):
                    out.append((await read_response(stream))[2])
                    continue
                break
        return out

    async def close(self) -> None:
        for pipe in self._pipes:
            pipe.cancel()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bytearray | None
) -> None:
    while data := await reader.read(65536):
        if keep is not None:
            keep += data
        writer.write(data)
        await writer.drain()


@contextlib.asynccontextmanager
async def wiretap(port: int) -> AsyncIterator[WireTap]:
    tap = await WireTap(port).start()
    try:
        yield tap
    finally:
        await tap.close()

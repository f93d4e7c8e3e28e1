"""A hand-written upstream that closes connections where a test says: it reads each request
whole, follows a plan for it, and counts what it received."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from tests.support.relaying import read_head

ANSWER, DROP, DROP_AFTER_BODY, PARTIAL_HEAD, AFTER_FIRST_LINE = (
    "answer", "drop", "drop after the body", "a partial head", "after the first line",
)  # fmt: skip
"""What the upstream does with a request: answer it; close the connection at its head
(the body unread), or once it read the body; or answer part of it and close."""

_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")
_CHUNKED = re.compile(rb"(?i)\r\ntransfer-encoding: *chunked")


@dataclass
class Step:
    """What to do with one request, and head lines to add to its answer."""

    action: str
    headers: bytes = b""
    then_close: bool = False
    """Close the connection right after the answer (no `Connection: close` said)."""


Plan = Callable[[int, int, bytes], Step]
"""(the connection's number, the request's number on it, its head) → the step."""


@dataclass
class Received:
    """One request the upstream read whole (or the head of one it dropped at the head)."""

    line: bytes
    body: bytes | None


@dataclass
class ClosingUpstream:
    plan: Plan
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    used: set[int] = field(default_factory=set)
    """The connections that carried a request of the test (not only the poller's)."""
    dropped: int = 0
    """Connections closed on a request with no byte of its reply."""

    def count(self, path: bytes) -> int:
        """Requests for `path` that reached the upstream (read whole or dropped at the head)."""
        return sum(1 for r in self.received if r.line.split(b" ")[1] == path)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn, number = self.connections, 0
        self.connections += 1
        try:
            while head := await read_head(reader):
                if b"X-Test" not in head:  # the proxy's poller
                    await read_body(reader, head)
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                self.used.add(conn)
                step = self.plan(conn, number, head)
                number += 1
                line = head.split(b"\r\n", 1)[0]
                if step.action == DROP:
                    self.received.append(Received(line, None))
                    self.dropped += 1
                    return
                body = await read_body(reader, head)
                self.received.append(Received(line, body))
                if step.action == DROP_AFTER_BODY:
                    self.dropped += 1
                    return
                reply = answer(line, body, step.headers)
                if step.action == PARTIAL_HEAD:
                    writer.write(reply[: reply.index(b"\r\n") + 10])
                    return
                if step.action == AFTER_FIRST_LINE:
                    writer.write(reply[: reply.index(b"}\n") + 4])
                    return
                writer.write(reply)
                if step.then_close:
                    await writer.drain()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    if length := _LENGTH.search(head):
        return await reader.readexactly(int(length.group(1)))
    if not _CHUNKED.search(head):
        return b""
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")
    return body


def lines(path: bytes) -> list[bytes]:
    """The NDJSON lines of a native stream, the last one final."""
    key = b"message" if path == b"/api/chat" else b"response"
    piece: object = {"role": "assistant", "content": "Hi"} if key == b"message" else "Hi"
    final: object = {"role": "assistant", "content": ""} if key == b"message" else ""
    base = {"model": "llama3.2", "created_at": "2025-01-01T00:00:00Z"}
    return [
        orjson.dumps({**base, key.decode(): piece, "done": False}) + b"\n",
        orjson.dumps(
            {**base, key.decode(): final, "done": True, "done_reason": "stop", "eval_count": 1}
        )
        + b"\n",
    ]


def answer(line: bytes, body: bytes, headers: bytes = b"") -> bytes:
    """A streamed (chunked NDJSON) reply when the request asked for one, else a single JSON."""
    path = line.split(b" ")[1]
    if path in (b"/api/generate", b"/api/chat") and b'"stream":true' in body:
        chunks = b"".join(b"%x\r\n%b\r\n" % (len(x), x) for x in lines(path))
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n%b"
            b"Transfer-Encoding: chunked\r\n\r\n%b0\r\n\r\n" % (headers, chunks)
        )
    single = lines(path)[-1] if path in (b"/api/generate", b"/api/chat") else b"{}"
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n%b"
        b"Content-Length: %d\r\n\r\n%b" % (headers, len(single), single)
    )

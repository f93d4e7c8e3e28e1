"""A request the HTTP/1 server parsed: its head as an `Incoming`, its body as it streams in."""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from collections.abc import Callable
from typing import Final, Protocol

from aiohttp import hdrs
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from ollama_tap.relay.http1.flow import FlowControl, Waiter
from ollama_tap.relay.http1.reply import Reply
from ollama_tap.relay.incoming import Incoming

BODY_HIGH_WATER: Final = 2 * 2**16
"""Request-body bytes held before the client's socket stops being read (aiohttp's figure:
twice its stream reader's limit)."""
STALL_SECONDS: Final = 75.0
"""A request body of which no byte came for this long, while its exchange waits for it,
cuts the connection (the idle cut of a keep-alive connection): a client that stalls does
not hold two sockets for ever."""
LINGER_SECONDS: Final = 10.0
"""How long the rest of an upload Ollama answered early is read and dropped before the
connection is cut (aiohttp's lingering time)."""


class Parse(enum.Enum):
    """Where a connection's parser is in its byte stream."""

    BETWEEN = "between requests"
    HEAD = "in a request head"
    BODY = "in a request body"


class Reading(Protocol):
    """The client connection's reading side, paused while a body's bytes are not taken."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class BodyStream:
    """A request body arriving after its head: fed by the connection, read by the upload.

    A `BodySource` (incoming.py) with aiohttp's StreamReader's back-pressure: above
    BODY_HIGH_WATER bytes held, the client's socket is paused until the upload took them.
    """

    def __init__(self, reading: Reading) -> None:
        self._reading = reading
        self._chunks: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._eof = False
        self._error: BaseException | None = None
        self._arrived = Waiter()
        self._discarding = False

    def feed(self, data: bytes) -> None:
        if self._discarding:
            return
        self._chunks.append(data)
        self._held += len(data)
        if self._held > BODY_HIGH_WATER:
            self._reading.pause_reading()
        self._arrived.wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._arrived.wake()

    def fail(self, error: BaseException) -> None:
        if not self._eof:
            self._error = error
            self._eof = True
            self._arrived.wake()

    def discard(self) -> None:
        """Nobody will read the rest: drop what is held and what still arrives."""
        self._discarding = True
        self._chunks.clear()
        self._held = 0
        self._reading.resume_reading()

    def is_eof(self) -> bool:
        return self._eof

    def whole(self) -> bytes | None:
        """The whole body, if it has all arrived (and nothing took any of it yet)."""
        if not self._eof or self._error is not None or self._discarding:
            return None
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    async def read(self) -> bytes:
        if self._eof and self._error is None:
            # The whole body came with the head (nearly every JSON request): no iterator.
            parts, self._held = list(self._chunks), 0
            self._chunks.clear()
            self._reading.resume_reading()
        else:
            parts = [data async for data in self.iter_any()]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def iter_any(self) -> BodyStream:
        return self

    def __aiter__(self) -> BodyStream:
        return self

    async def __anext__(self) -> bytes:
        # An iterator rather than an async generator (docs/architecture.md, mypyc).
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise StopAsyncIteration
            await self._arrived.wait()
        data = self._chunks.popleft()
        self._held -= len(data)
        if self._held <= BODY_HIGH_WATER:
            self._reading.resume_reading()
        return data


class FrontRequest(Incoming):
    """A request the HTTP/1 server parsed and relays itself."""

    def __init__(
        self,
        reading: Reading,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        remote: str,
        arrived: float,
        *,
        version: str,
        keep_alive: bool,
    ) -> None:
        # As aiohttp's parser builds it: URL(target) would read "//x/y" as host x, path /y.
        path, _, fragment = target.partition("#")
        path, _, query = path.partition("?")
        content = BodyStream(reading)
        has_body = _has_body(headers)
        super().__init__(
            method,
            URL.build(path=path, query_string=query, fragment=fragment, encoded=True),
            CIMultiDictProxy(headers),
            remote,
            arrived,
            content,
            has_body,
        )
        self.body = content
        """The same object as `content`, typed as what it is: compiled, its calls are direct."""
        self.version = version
        """"1.1" or "1.0": the response head's version and framing follow it."""
        upgrade = hdrs.UPGRADE in headers and "upgrade" in headers.get(hdrs.CONNECTION, "").lower()
        self.keep_alive = keep_alive and not upgrade
        """Whether the connection serves another request after this one: not after one that
        asked to upgrade it (relayed as a plain request, but llhttp parses nothing after
        it), nor after a reply that ends with the connection (the relay says so)."""
        self.expects_continue = version == "1.1" and hdrs.EXPECT in headers
        """The client waits for `100 Continue` before its body (the rule refused any other
        expectation; RFC 9110 §10.1.1 has an HTTP/1.0 one ignored)."""
        self.longest_field = 0
        """Bytes of the longest header name or value (refused past MAX_FIELD: serves.py)."""
        self.sent: Reply | None = None
        """The upstream's reply, when the request was sent from the callback it arrived in
        (`relay.send_on_arrival`), until its relay adopts it."""
        if not has_body:
            content.feed_eof()

    @property
    def path(self) -> str:
        return self.rel_url.path


def _has_body(headers: CIMultiDict[str]) -> bool:
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "transfer-encoding" or (lowered == "content-length" and value.strip() != "0"):
            return True
    return False


class BodyClock:
    """The two time bounds on the request body a connection reads: STALL_SECONDS without
    a byte while an exchange waits for it, LINGER_SECONDS for the dropped rest of an upload
    answered early. Either cuts the connection (`cut`, told why). The callback lives only
    in the armed timer: the connection and its clock make no cycle."""

    def __init__(self, reading: FlowControl) -> None:
        self.reading = reading
        self.last_byte = 0.0
        """Monotonic time of the body's last byte (the connection sets it as they come)."""
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, cut: Callable[[str], None]) -> None:
        """A body is streaming in: it must keep coming (unless a bound is armed already)."""
        if self._timer is not None:
            return
        self.last_byte = time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(STALL_SECONDS, self._stalled, cut)

    def linger(self, cut: Callable[[str], None]) -> None:
        """Nobody reads the rest of the body: it must end within LINGER_SECONDS."""
        self.stop()
        self._timer = asyncio.get_running_loop().call_later(
            LINGER_SECONDS, cut, "the dropped rest of an upload did not end in time"
        )

    def stop(self) -> None:
        """The body ended (or the connection did)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stalled(self, cut: Callable[[str], None]) -> None:
        # Re-armed from the last byte rather than re-made at every read of the body.
        now = time.monotonic()
        if self.reading.reading_paused:
            self.last_byte = now  # held back because the upload does not take it: no stall
        due = self.last_byte + STALL_SECONDS
        if due > now:
            self._timer = asyncio.get_running_loop().call_later(due - now, self._stalled, cut)
            return
        self._timer = None
        cut(f"no byte of the request body for {STALL_SECONDS:g} s")

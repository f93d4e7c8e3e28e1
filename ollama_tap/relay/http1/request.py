"""A request the HTTP/1 server parsed: its head as an `Incoming`, its body as it streams in."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Final, Protocol

import structlog
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from ollama_tap.relay.failures import ClientGone
from ollama_tap.relay.http1.flow import Waiter
from ollama_tap.relay.http1.reply import Reply
from ollama_tap.relay.incoming import Incoming

BODY_HIGH_WATER: Final = 2 * 2**16
"""Request-body bytes held before the client's socket stops being read (aiohttp's figure:
twice its stream reader's limit)."""
BODY_IDLE: Final = 75.0
"""Seconds a request body may bring no byte, while the proxy waits for one, before its
connection is cut: the keep-alive bound on heads (clients.KEEPALIVE_SECONDS), applied to
silence rather than to the whole upload, which may rightly take long. Time the upload
waits on Ollama (bytes held, socket paused) is not the client's and is not counted."""

log = structlog.get_logger("ollama_tap.front")


class Reading(Protocol):
    """The client connection's reading side, paused while a body's bytes are not taken."""

    remote: str

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def body_idle(self) -> None:
        """The body brought no byte for BODY_IDLE seconds: cut the connection."""


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
        self._watch: asyncio.TimerHandle | None = None
        self._last = 0.0
        """When the last byte came (monotonic), once `watch` was called."""

    def watch(self) -> None:
        """Cut the connection after BODY_IDLE seconds without a byte (`Reading.body_idle`).
        Called for a body still arriving after a read: one that came with its head (nearly
        every JSON request) never starts a timer."""
        if self._watch is None and not self._eof:
            self._last = time.monotonic()
            self._watch = asyncio.get_running_loop().call_later(BODY_IDLE, self._check)

    def _check(self) -> None:
        self._watch = None
        if self._eof or self._discarding:
            return
        now = time.monotonic()
        if self._held:  # bytes the upload has not taken yet: the wait is Ollama's
            self._last = now
        quiet = now - self._last
        if quiet < BODY_IDLE:
            self._watch = asyncio.get_running_loop().call_later(BODY_IDLE - quiet, self._check)
            return
        log.info("front_body_timeout", client=self._reading.remote, idle_seconds=BODY_IDLE)
        self.fail(ClientGone(f"no byte of the request body for {BODY_IDLE:g} s"))
        self._reading.body_idle()

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def feed(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._watch is not None:
            self._last = time.monotonic()
        self._chunks.append(data)
        self._held += len(data)
        if self._held > BODY_HIGH_WATER:
            self._reading.pause_reading()
        self._arrived.wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._arrived.wake()
        self._unwatch()

    def fail(self, error: BaseException) -> None:
        if not self._eof:
            self._error = error
            self._eof = True
            self._arrived.wake()
            self._unwatch()

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
        self.keep_alive = keep_alive
        self.longest_field = 0
        """Bytes of the longest header name or value (aiohttp refuses past its limit)."""
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

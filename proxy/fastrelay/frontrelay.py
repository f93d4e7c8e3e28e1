"""One exchange served by the front (see `front.py`): the request as the front parsed it, its
body as it streams in, and the relay that writes the client's response itself."""

from __future__ import annotations

import asyncio
import collections
import email.utils
import time
from typing import TYPE_CHECKING, Final, cast

from aiohttp import hdrs, web
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy import ollama
from proxy.exchange import Outcome
from proxy.fastrelay import wire
from proxy.fastrelay.relay import FastRelay
from proxy.fastrelay.reply import Reply
from proxy.forward import HOP_BY_HOP, Pairs, kept_headers

if TYPE_CHECKING:
    from proxy.fastrelay.front import FrontConnection

BODY_HIGH_WATER: Final = 2 * 2**16
"""Request-body bytes held before the client's socket stops being read (aiohttp's figure:
twice its stream reader's limit)."""
WRITTEN: Final = web.StreamResponse()
"""What a front exchange returns when it wrote its response itself."""


class BodyStream:
    """A request body arriving after its head: fed by the connection, read by the upload.

    Offers the three calls of aiohttp's StreamReader the relay uses (`is_eof`, `read`,
    `iter_any`) and the same back-pressure: above BODY_HIGH_WATER bytes held, the client's
    socket is paused until the upload has taken them.
    """

    def __init__(self, conn: FrontConnection) -> None:
        self._conn = conn
        self._chunks: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._discarding = False

    def feed(self, data: bytes) -> None:
        if self._discarding:
            return
        self._chunks.append(data)
        self._held += len(data)
        if self._held > BODY_HIGH_WATER:
            self._conn.pause_reading()
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def fail(self, error: BaseException) -> None:
        if not self._eof:
            self._error = error
            self._eof = True
            self._wake()

    def discard(self) -> None:
        """Nobody will read the rest: drop what is held and what still arrives."""
        self._discarding = True
        self._chunks.clear()
        self._held = 0
        self._conn.resume_reading()

    def is_eof(self) -> bool:
        return self._eof

    def whole(self) -> bytes | None:
        """The whole body, if it has all arrived (and nothing took any of it yet)."""
        if not self._eof or self._error is not None or self._discarding:
            return None
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    async def read(self) -> bytes:
        if self._eof and self._error is None:
            # The whole body came with the head (nearly every JSON request): no generator.
            parts, self._held = list(self._chunks), 0
            self._chunks.clear()
            self._conn.resume_reading()
        else:
            parts = [data async for data in self.iter_any()]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def iter_any(self) -> BodyStream:
        return self

    def __aiter__(self) -> BodyStream:
        return self

    async def __anext__(self) -> bytes:
        # An iterator rather than an async generator: mypyc compiles no async generators.
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._chunks.popleft()
        self._held -= len(data)
        if self._held <= BODY_HIGH_WATER:
            self._conn.resume_reading()
        return data

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class FrontRequest:
    """A request the front parsed, offering the parts of aiohttp's `web.Request` the relays
    read (method, paths, headers, body, transport); it is passed where they expect one."""

    def __init__(
        self,
        conn: FrontConnection,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        keep_alive: bool,
        has_body: bool,
    ) -> None:
        self.protocol = conn
        self.transport = conn.transport
        self.remote = conn.remote
        self.method = method
        # As aiohttp's parser builds it: URL(target) would read "//x/y" as host x, path /y.
        path, _, fragment = target.partition("#")
        path, _, query = path.partition("?")
        self.rel_url = URL.build(path=path, query_string=query, fragment=fragment, encoded=True)
        self.headers = CIMultiDictProxy(headers)
        self.keep_alive = keep_alive
        self.body_exists = has_body
        self.longest_field = 0
        """Bytes of the longest header name or value (aiohttp refuses past its limit)."""
        self.arrived: float | None = None
        """Monotonic time the head was parsed: where the exchange's clock starts."""
        self.sent: Reply | None = None
        """The upstream's reply, when the front sent the request before its exchange was
        made (see `FrontConnection.send_now`), until the relay adopts it."""
        self.content = BodyStream(conn)
        if not has_body:
            self.content.feed_eof()

    @property
    def path(self) -> str:
        return self.rel_url.path

    @property
    def query_string(self) -> str:
        return self.rel_url.query_string

    @property
    def content_type(self) -> str:
        # Read only by `ollama.tees_request_body`, which takes the media type itself.
        return self.headers.get(hdrs.CONTENT_TYPE, "")


class FrontRelay(FastRelay):
    """The fast relay, writing the client's response itself instead of through aiohttp.

    The head is what aiohttp's server made of the same reply (see `response_head`), taken
    inside the upstream socket's callback as soon as it is parsed and sent in the same
    write as the first body piece; the body pieces are written as they arrive. The task
    that sent the request only waits for the end (and writes a head that came alone).
    """

    head: bytes = b""
    began = False
    announced = False
    head_sent = False

    @property
    def front_request(self) -> FrontRequest:
        return cast(FrontRequest, self.request)

    def reply_started(self) -> bool:
        return self.head_sent

    def client_full(self) -> bool:
        return self.front_request.protocol.writing_paused  # typed: a direct read, compiled

    def adopt_sent(self) -> Reply | None:
        request = self.front_request
        reply, request.sent = request.sent, None
        if reply is not None:
            self.conn, self.reply = reply.conn, reply
        return reply

    def delivered(self) -> bool:
        """The client has every byte of a complete reply (a chunked one ends only when the
        relay writes its last chunk, after this is asked)."""
        reply = self.reply
        return (
            self.head_sent
            and not self.chunked
            and reply is not None
            and reply.ended
            and reply.error is None
        )

    def head_arrived(self) -> None:
        # Inside the upstream socket's callback: the head is answered and the body of the
        # same read relayed before this callback returns, a loop turn sooner than the task
        # would. A bug is kept for the task to raise (the exchange ends as `proxy_error`).
        reply = self.reply
        if self.ended or self.began or reply is None:
            return
        try:
            self.begin(reply)
        except Exception as exc:
            self.bug = exc
            self.stop_upstream()

    def begin(self, reply: Reply) -> None:
        """Make the client's response head from the reply's and take the body from here on;
        the head goes out with the first body piece (or alone, from the task, when the read
        that brought it carried none). The Exchange learns of the head once it is out, and
        `response_headers` fires then: nothing but the head's bytes delays the first token."""
        request = self.front_request
        self.client = request.transport
        self.head, self.chunked = response_head(
            reply.status, reply.reason, reply.headers, request.method, request.keep_alive
        )
        # Only a head taken whole counts: one that failed is never announced (the exchange
        # ends as `proxy_error` with the proxy's 500, which is not what the upstream said).
        self.began = True
        reply.attach(self)

    async def relay_reply(self, reply: Reply) -> web.StreamResponse:
        request = self.front_request
        if self.bug is None and not self.began:
            self.begin(reply)
        if self.bug is None and not self.head_sent and not self.gone:
            self.write_body(request.transport, b"")
        await self.pump(reply, request.protocol)
        if self.bug is not None:
            raise self.bug
        if self.gone or (request.transport.is_closing() and not self.delivered()):
            self.finish(Outcome.CLIENT_DISCONNECTED)
            return WRITTEN
        reader = self.reader
        if reply.error is not None:
            self.end_cut(reader, reply.error)
            return WRITTEN
        at = time.monotonic()
        if self.chunked:
            request.transport.write(wire.LAST_CHUNK)
        # The duration ends with the last write, not after the reader's parse of a single
        # reply (up to the tee limit: tens of ms for a large embedding).
        self.close_reader(reader, at)
        self.finish(ollama.outcome_of(self.ex, reader), at)
        return WRITTEN

    def write_body(self, client: asyncio.Transport, data: bytes) -> float:
        if self.head_sent:
            # Every piece after the first (the per-token path): no head to join. An empty
            # piece must not become a chunk: "0\r\n\r\n" would end the reply.
            if self.chunked and data:
                client.writelines(wire.chunk_frames(data))
            elif data:
                client.write(data)
            return time.monotonic()
        frames: tuple[bytes, ...] = (
            wire.chunk_frames(data) if self.chunked and data else (data,) if data else ()
        )
        self.head_sent = True
        frames = (self.head, *frames)
        if len(frames) == 1:
            client.write(frames[0])
        elif frames:
            client.writelines(frames)
        at = time.monotonic()  # before the observers run: their time is not the client's
        # The Exchange and the observers hear of the reply once its head is on its way, not
        # before: when the upstream answered within the loop turn that sent it the request
        # (it often does: the kernel runs it on this core as soon as the request is
        # written), the request hook has not run yet, and parsing the request for it (tens
        # of microseconds) would otherwise delay the client's first token.
        self.announce()
        return at

    def announce(self) -> None:
        """Fill the Exchange from the reply's head, once, and fire `request` (if not yet)
        and `response_headers`."""
        if not self.announced:
            self.announced = True
            reply = self.reply
            assert reply is not None
            headers = CIMultiDictProxy(CIMultiDict(reply.headers))
            self.reader = self.note_head(reply.status, headers, reply.arrived)
            self.announce_reply()

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        if self.began:
            self.announce()  # the head came, but the client never got it
        super().finish(outcome, at)


def response_head(
    status: int, reason: str, headers: Pairs, method: str, keep_alive: bool
) -> tuple[bytes, bool]:
    """The response head aiohttp's server writes for this upstream reply through the aiohttp
    relay (`RelayResponse`), and whether the body goes chunked.

    The upstream's headers in their order minus hop-by-hop ones; a body without a length is
    chunked (the client spoke HTTP/1.1: the front hands older clients to aiohttp); a reply
    that must be empty keeps no Transfer-Encoding, nor a Content-Length on 1xx/204/304; and
    `Connection: close` when the client asked to close. Nothing else is added.
    """
    out = kept_headers(headers, HOP_BY_HOP)  # Connection too: only `close` is added back
    empty = method == "HEAD" or status in (204, 304) or status < 200
    chunked = False
    if empty:
        if status < 200 or status in (204, 304):
            out = [(k, v) for k, v in out if k.lower() != "content-length"]
    elif not any(k.lower() == "content-length" for k, _ in out):
        out.append((hdrs.TRANSFER_ENCODING, "chunked"))
        chunked = True
    if not keep_alive:
        out.append((hdrs.CONNECTION, "close"))
    return wire.head(f"HTTP/1.1 {status} {reason}", out), chunked


def error_response(resp: web.StreamResponse, keep_alive: bool) -> bytes:
    """A response the proxy made itself (web.Response: the 5xx of `proxy_error`) as bytes,
    with the headers aiohttp's server would give it."""
    body = resp.body if isinstance(resp, web.Response) and isinstance(resp.body, bytes) else b""
    headers = CIMultiDict(resp.headers)
    headers[hdrs.CONTENT_LENGTH] = str(len(body))
    headers.setdefault(hdrs.DATE, email.utils.formatdate(usegmt=True))
    headers.setdefault(hdrs.SERVER, SERVER_SOFTWARE)
    if not keep_alive:
        headers[hdrs.CONNECTION] = "close"
    return wire.head(f"HTTP/1.1 {resp.status} {resp.reason}", headers.items()) + body

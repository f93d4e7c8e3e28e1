"""The aiohttp transport: aiohttp's server and client on both sides of the relay.

It serves `--relay aiohttp`, and with the HTTP/1 transport every request that transport's
rule hands to aiohttp's server (HTTP/1.0, `Expect`, odd framing, a connection after one).
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, Final

import aiohttp
from aiohttp import hdrs, web

from ollama_tap.exchange import Outcome
from ollama_tap.relay.failures import AIOHTTP_BROKEN_OFF, ClientGone, no_reply
from ollama_tap.relay.headers import MAX_FIELD, downstream_headers, upstream_headers
from ollama_tap.relay.http1 import clients
from ollama_tap.relay.incoming import Incoming
from ollama_tap.relay.retry import Upload, held_for_resend, retry_reason
from ollama_tap.relay.tap import Tap, Tapped

SESSION: Final = web.AppKey("session", aiohttp.ClientSession)
"""The one upstream client of the app (also the poller's and the vocabulary loader's)."""
_SERVER_ADDED: Final = (hdrs.SERVER, hdrs.DATE, hdrs.CONTENT_TYPE)
"""Headers aiohttp's server may add on its own; removed again unless Ollama sent them."""


def make_session(trace_configs: list[aiohttp.TraceConfig] | None = None) -> aiohttp.ClientSession:
    """An upstream client, transparent by construction (the app's, for the poller and the
    vocabulary loader; and the relay's, `relay_session`).

    No headers of its own (the client's are relayed as they are), no decompression, no
    cookie jar, no proxy from the environment, and no connection cap (a cap would queue
    requests where nobody can see them; Ollama has its own queue and reports it).
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        # A reply header up to what the proxy's server accepts from clients (the HTTP/1
        # transport's parser has no limit of its own), not aiohttp's 8,190 bytes.
        max_field_size=MAX_FIELD,
        trace_configs=trace_configs,
    )


class Attempt:
    """One send of a request through the relay's session (its `trace_request_ctx`)."""

    def __init__(self) -> None:
        self.reused = False
        """The connection it went out on had carried an earlier exchange."""


async def _reused(_: aiohttp.ClientSession, ctx: SimpleNamespace, __: object) -> None:
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, Attempt):
        attempt.reused = True


def relay_session(fresh: bool = False) -> aiohttp.ClientSession:
    """The relay's upstream client: what is sent again is decided by relay/retry.py, as on
    the HTTP/1 transport, not by aiohttp's own rule (which resends `DELETE /api/delete` and
    never a POST to /api/chat, on fresh connections too); a trace tells it which
    connections were reused. `fresh`: a client for one exchange's second send, whose
    connection is new and closes with it."""
    trace = None
    if not fresh:
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_reused)
    session = make_session([trace] if trace is not None else None)
    session._retry_connection = False  # private, as aiohttp's own test client sets it
    return session


def unanswered(exc: BaseException) -> bool | None:
    """How aiohttp's client says a connection ended before any byte of the reply: True for
    a reset (or a write that failed), False for a close, None when it did not end so.
    A reset says nothing of bytes that came before it, and none are assumed."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        # Its message is the part of a reply parsed before the close, if any came.
        return False if isinstance(exc.message, str) else None
    if isinstance(exc, aiohttp.ClientConnectorError):
        return None  # no connection was made
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)):
        return True
    return None


class RelayResponse(web.StreamResponse):
    """A StreamResponse that adds no header the upstream did not send.

    aiohttp's server fills in Server, Date and a default Content-Type; a transparent proxy
    must not, so they are taken out again after aiohttp prepared its headers (an override
    of a private method: aiohttp is pinned for it, tests/relay/test_site.py checks it).
    """

    async def _prepare_headers(self) -> None:
        sent = {k for k in self.headers if k in _SERVER_ADDED}
        await super()._prepare_headers()
        for name in _SERVER_ADDED:
            if name not in sent:
                self.headers.popall(name, None)
        request = self._req
        if (
            request is not None
            and request.version < aiohttp.HttpVersion11
            and self.keep_alive
            and hdrs.CONNECTION not in self.headers
        ):
            # A reply without a length to an HTTP/1.0 client ends where the connection
            # closes (RFC 9112 §6.3): aiohttp leaves out `Connection: keep-alive` for it
            # but does not record that it must close, and would keep the connection, so
            # the client could never tell where the reply (every Ollama stream) ends.
            self.force_close()


class AiohttpTransport:
    """The catch-all handler of aiohttp's router: every request it gets goes to Ollama."""

    def __init__(self, tap: Tap, app: web.Application) -> None:
        self.tap = tap
        self.app = app
        settings = tap.settings
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout, sock_read=settings.read_timeout
        )
        self.session: aiohttp.ClientSession | None = None
        """The relay's upstream client (`relay_session`), for the app's life."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        return await self.tap.drive(AiohttpRelay(self, request))


class AiohttpRelay:
    """The relay of one exchange through aiohttp's client and server."""

    def __init__(self, transport: AiohttpTransport, request: web.Request) -> None:
        self.transport = transport
        self.tap = transport.tap
        self.request = request
        incoming = self.incoming = Incoming(
            request.method,
            request.rel_url,
            request.headers,
            request.remote or "",
            # aiohttp's server does not say when the head arrived; its handler starts a
            # little later (the HTTP/1 transport stamps the head itself).
            time.monotonic(),
            GuardedBody(request, clients.KEEPALIVE_SECONDS),
            request.body_exists,
        )
        self.tapped = Tapped(self.tap, incoming)
        self.upstream: aiohttp.ClientResponse | None = None
        self.response: RelayResponse | None = None
        self.resend = b""
        """The body bytes a second send writes first (a streamed upload's so far)."""

    async def run(self) -> web.StreamResponse:
        tapped, target = self.tapped, self.tap.target
        data = await tapped.upload()
        upload = None if data is None or isinstance(data, bytes) else Upload(data)
        if upload is None:
            tapped.fire_request()  # aiohttp's client gives no moment between send and reply
        session = self.transport.session
        assert session is not None  # made at the app's start-up
        fresh: aiohttp.ClientSession | None = None
        try:
            while True:
                attempt = Attempt()
                try:
                    up = await self.send(fresh or session, upload or data, attempt)
                    break
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    if await self.may_resend(exc, attempt, upload):
                        fresh = fresh or relay_session(fresh=True)
                        if upload is not None:
                            upload = Upload(upload.body, self.resend)
                        continue
                    if self.client_gone():
                        self.finish(Outcome.CLIENT_DISCONNECTED)
                        return web.Response(status=499)
                    status, message = no_reply(target.url, exc, isinstance(exc, AIOHTTP_BROKEN_OFF))
                    return await self.proxy_error(status, message, Outcome.UPSTREAM_UNREACHABLE)
            self.upstream = up
            try:
                return await self.relay(up)
            finally:
                up.close()
        finally:
            if fresh is not None:
                await fresh.close()

    async def send(
        self, session: aiohttp.ClientSession, data: Any, attempt: Attempt
    ) -> aiohttp.ClientResponse:
        request, target = self.request, self.tap.target
        return await session.request(
            request.method,
            target.full(request.rel_url.raw_path_qs),
            headers=upstream_headers(target.headers_of(self.incoming), target.host),
            data=data,
            allow_redirects=False,
            timeout=self.transport.timeout,
            trace_request_ctx=attempt,
        )

    async def may_resend(self, exc: BaseException, attempt: Attempt, upload: Upload | None) -> bool:
        """Whether to send the request again (relay/retry.py's rule, a client still there,
        a streamed body's bytes so far at hand: `resend`); marks the exchange retried."""
        reset = unanswered(exc)
        ex = self.tapped.ex
        reason = None if reset is None else retry_reason(ex, attempt.reused, False, reset)
        if reason is None or self.client_gone():
            return False
        resend = await held_for_resend(upload, self.tapped.sent_so_far)
        if resend is None:
            return False
        self.resend = resend
        ex.retried = reason
        return True

    async def relay(self, up: aiohttp.ClientResponse) -> web.StreamResponse:
        tapped = self.tapped
        tapped.reply_head(up.status, up.headers)
        tapped.announce()
        resp = self.response = RelayResponse(status=up.status, reason=up.reason)
        resp.headers.extend(downstream_headers(up.headers))
        try:
            await resp.prepare(self.request)
            async for data in up.content.iter_any():
                await resp.write(data)
                tapped.read_piece(data, time.monotonic())
        except ConnectionResetError:
            self.finish(*tapped.left(Outcome.CLIENT_DISCONNECTED))
            return resp
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError) as exc:
            # The upstream cut its reply: cut the client's connection the same way, so the
            # client sees the truncated reply a direct connection would have given it.
            self.abort_client()
            self.finish(tapped.cut(exc))
            return resp
        at = time.monotonic()
        try:
            await resp.write_eof()
        except ConnectionResetError:
            self.finish(*tapped.left(Outcome.CLIENT_DISCONNECTED))
            return resp
        written = time.monotonic()
        tapped.close_reader(at)
        self.finish(tapped.outcome(), written)
        return resp

    def reply_started(self) -> bool:
        return self.response is not None and self.response.prepared

    def client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def abort_client(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    async def proxy_error(self, status: int, message: str, outcome: Outcome) -> web.Response:
        body = self.tapped.proxy_error(status, message)
        resp = web.Response(status=status, body=body, content_type="application/json")
        self.finish(outcome)
        return resp

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        if self.upstream is not None:
            # Closing (not releasing) the upstream connection is how Ollama learns the
            # client is gone and stops generating.
            self.upstream.close()
        self.tapped.finish(outcome, at)


class GuardedBody:
    """aiohttp's request body with a read timeout: no byte of it for `seconds` (a client
    that stalls, or a body aiohttp's parser gave up on without telling its reader) cuts
    the client's connection, and the exchange ends as the client's doing. The HTTP/1
    server's own connections keep no such timeout for the bodies it reads itself.
    An iterator rather than an async generator (see docs/architecture.md, mypyc)."""

    def __init__(self, request: web.Request, seconds: float) -> None:
        self.request = request
        self.content = request.content
        self.seconds = seconds

    def is_eof(self) -> bool:
        return self.content.is_eof()

    async def read(self) -> bytes:
        return await self.content.read()

    def iter_any(self) -> GuardedBody:
        return self

    def __aiter__(self) -> GuardedBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            async with asyncio.timeout(self.seconds):
                data = await self.content.readany()
        except TimeoutError:
            transport = self.request.transport
            if transport is not None:
                transport.abort()
            raise ClientGone(f"no byte of the request body for {self.seconds:g} s") from None
        if not data:
            raise StopAsyncIteration
        return data

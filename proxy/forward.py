"""The catch-all handler: stream up, stream down, fill the Exchange, emit hooks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final

import aiohttp
import structlog
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy import ollama
from proxy.config import Settings
from proxy.exchange import Exchange, Outcome, OutputChunk
from proxy.hooks import Hooks

log = structlog.get_logger("ollama_tap.forward")

# RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy ones proxies still meet.
HOP_BY_HOP: Final = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Trailers",
        "Transfer-Encoding",
        "Upgrade",
    )
)
# Headers aiohttp's server may add on its own; removed again unless Ollama sent them.
_SERVER_ADDED: Final = (hdrs.SERVER, hdrs.DATE, hdrs.CONTENT_TYPE)


NOT_UPSTREAM: Final = HOP_BY_HOP | {"host"}
"""What never goes upstream as the client sent it (Host is rewritten)."""

Pairs = Iterable[tuple[str, str]]


def kept_headers(headers: Pairs, fixed: frozenset[str]) -> list[tuple[str, str]]:
    """The headers, in order, minus `fixed` (lower-case names) and those a Connection header
    names (RFC 9110 §7.6.1). Plain pairs: the fast relay builds heads from these directly."""
    pairs = headers if isinstance(headers, list) else list(headers)
    drop = fixed
    for name, value in pairs:
        if name.lower() == "connection":  # a set is built only for a Connection header
            drop = drop | {t.strip().lower() for t in value.split(",")}
    return [(k, v) for k, v in pairs if k.lower() not in drop]


def upstream_headers(headers: CIMultiDictProxy[str], host: str) -> CIMultiDict[str]:
    """The client's headers for aiohttp's client: minus hop-by-hop ones, with Host
    rewritten to the upstream's, and without `Expect`.

    aiohttp's server has answered `100 Continue` itself, so the body is on its way; passed
    on, the expectation would make aiohttp's client wait for the upstream's own 100 before
    sending it, forever from an upstream that ignores Expect (as RFC 9110 allows). Repeated
    names take their first spelling: aiohttp's client keeps only the last of two lines whose
    names differ in case (a name's case means nothing; losing a line does).
    """
    spelling: dict[str, str] = {}
    out = CIMultiDict(
        (spelling.setdefault(name.lower(), name), value)
        for name, value in kept_headers(headers.items(), NOT_UPSTREAM)
        if name.lower() != "expect"
    )
    out[hdrs.HOST] = host
    return out


def downstream_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict(kept_headers(headers.items(), HOP_BY_HOP))


class RelayResponse(web.StreamResponse):
    """A StreamResponse that adds no header the upstream did not send.

    aiohttp's server fills in Server, Date and a default Content-Type; a transparent proxy
    must not, so they are taken out again after aiohttp prepared its headers.
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


_BROKEN_OFF: Final = (
    aiohttp.ClientConnectionResetError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientResponseError,
    aiohttp.ClientPayloadError,
)
"""How aiohttp's client says the upstream accepted the connection but gave no valid reply."""


def _broken_reason(exc: BaseException) -> str:
    """What the upstream did wrong, on one line (aiohttp's parser errors quote the bytes
    they choked on over several lines, inside the response error's own repr)."""
    text = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split()) or 'no detail'}"


MakeRelay = Callable[["Forwarder", web.Request, Exchange], "_Relay"]
"""How the forwarder makes the relay of one exchange (the aiohttp relay, the fast relay)."""


class Forwarder:
    """Relays every request to Ollama byte for byte and fills one Exchange per request."""

    def __init__(
        self,
        settings: Settings,
        hooks: Hooks,
        session: Callable[[], aiohttp.ClientSession],
        shutting_down: Callable[[], bool],
        make_relay: MakeRelay | None = None,
    ) -> None:
        self.settings = settings
        self._make_relay = make_relay or _Relay
        self.hooks = hooks
        self._session = session
        self._shutting_down = shutting_down
        self._in_flight: set[asyncio.Task[Any]] = set()
        up = settings.upstream_url
        self.upstream = up
        self._path_prefix = up.raw_path.rstrip("/")
        self._origin = str(up.with_path("", encoded=True)).rstrip("/")
        host = f"[{up.host}]" if up.host and ":" in up.host else str(up.host)
        self.upstream_host = f"{host}:{up.port}" if up.port else host
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout, sock_read=settings.read_timeout
        )

    def target(self, request: web.Request) -> URL:
        """The upstream URL of this request (for aiohttp's client)."""
        return URL(self._origin + self.target_path(request), encoded=True)

    def target_path(self, request: web.Request) -> str:
        """The upstream request target, path and query, as the fast relay writes it (yarl
        leaves an encoded path as it is, `//` and dot segments included)."""
        # The client's exact path and query encoding; only the origin (and Ollama's path
        # prefix, if OLLAMA_HOST had one) changes. rel_url, not raw_path: a request line in
        # absolute form (`GET http://host/api/tags`) must not carry its origin along.
        return self._path_prefix + request.rel_url.raw_path_qs

    async def handle(
        self,
        request: web.Request,
        make_relay: MakeRelay | None = None,
    ) -> web.StreamResponse:
        """Relay one request; `make_relay` overrides the relay (the front's own)."""
        # DESIGN's client-side clock starts when the request head arrived: the front says
        # when; aiohttp's server does not, and its handler starts a little later.
        arrived = getattr(request, "arrived", None) or time.monotonic()
        ex = Exchange(
            method=request.method,
            path=request.path,
            query=request.query_string,
            endpoint=ollama.endpoint_of(request.rel_url.raw_path),
            client=request.remote or "",
            request_headers=dict(request.headers),
            started=arrived,
            started_wall=time.time() - (time.monotonic() - arrived),
        )
        relay = (make_relay or self._make_relay)(self, request, ex)
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        try:
            return await relay.run()
        except asyncio.CancelledError:
            relay.finish(Outcome.SHUTDOWN if self._shutting_down() else Outcome.CLIENT_DISCONNECTED)
            raise
        except Exception:
            log.exception("relay_failed", id=ex.id, path=ex.path)
            if relay.reply_started():
                relay.abort_client()
                relay.finish(Outcome.PROXY_ERROR)
                raise
            message = "ollama-tap: internal error while relaying this request; see the proxy log."
            return await relay.proxy_error(500, message, Outcome.PROXY_ERROR)

    def cancel_after(self, grace: float) -> None:
        """Cancel every exchange still in flight `grace` seconds from now (`shutdown`).

        aiohttp's own shutdown waits its timeout once for handlers to finish and then once
        more after asking them to stop, which a relay reading the upstream never notices:
        the grace period would double. Cancelling here keeps it to `grace`.
        """
        asyncio.get_running_loop().call_later(grace, self._cancel_all)

    def _cancel_all(self) -> None:
        for task in list(self._in_flight):
            task.cancel()


class _Relay:
    """The state of one exchange while it is relayed."""

    def __init__(self, fwd: Forwarder, request: web.Request, ex: Exchange) -> None:
        self.fwd = fwd
        self.request = request
        self.ex = ex
        self.hooks = fwd.hooks
        self.tee = ollama.tees_request_body(ex.endpoint, request.content_type)
        self.tee_buf: bytearray | None = bytearray() if self.tee else None
        self.request_fired = False
        self.ended = False
        self.upstream: aiohttp.ClientResponse | None = None
        self.response: RelayResponse | None = None

    # -- request side -------------------------------------------------------------------

    def fire_request(self, truncated: bool = False) -> None:
        """Parse the teed body (once) and fire the request hook."""
        if self.request_fired:
            return
        self.request_fired = True
        ex = self.ex
        if self.tee:
            body = bytes(self.tee_buf) if self.tee_buf is not None else b""
            ex.request_body = body if self.tee_buf is not None else None
            ex.request = ollama.parse_request_fields(body, truncated or self.tee_buf is None)
            self.tee_buf = None  # the Exchange holds the one copy from here on
        self.hooks.request(ex)

    def tee_piece(self, data: bytes) -> None:
        self.ex.request_bytes += len(data)
        if self.tee_buf is not None:
            if len(self.tee_buf) + len(data) <= self.fwd.settings.body_tee_limit:
                self.tee_buf += data
            else:
                self.tee_buf = None

    def body(self) -> AsyncIterator[bytes]:
        return _TeedBody(self)

    async def upload(self) -> bytes | AsyncIterator[bytes] | None:
        """What to send upstream: nothing, the body at hand, or the body as it streams in.

        A body that arrived whole with the request head (every small JSON request) goes in
        one write: nothing is held back, and the upstream gets the request a few hundred
        microseconds sooner than through the streaming path. The `request` hook fires when
        the streamed body ends; for the other two the relay fires it once the request is on
        its way (`fire_request`), so parsing and observers do not delay it.
        """
        content = self.request.content
        if not self.request.body_exists:
            return None
        if content.is_eof():
            data = await content.read()
            self.tee_piece(data)
            return data
        return self.body()

    # -- the exchange -------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        request = self.request
        data = await self.upload()
        if data is None or isinstance(data, bytes):
            self.fire_request()  # aiohttp's client gives no moment between send and reply
        try:
            up = await self.fwd._session().request(
                request.method,
                self.fwd.target(request),
                headers=upstream_headers(request.headers, self.fwd.upstream_host),
                data=data,
                allow_redirects=False,
                timeout=self.fwd.timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            if self.client_gone():
                self.finish(Outcome.CLIENT_DISCONNECTED)
                return web.Response(status=499)
            return await self.unreachable(exc, isinstance(exc, _BROKEN_OFF))
        self.upstream = up
        try:
            return await self.relay(up)
        finally:
            up.close()

    def reply_started(self) -> bool:
        """Whether the client has been sent a response head (an error can only cut it)."""
        return self.response is not None and self.response.prepared

    def begin_reply(
        self,
        status: int,
        reason: str | None,
        headers: CIMultiDictProxy[str],
        arrived: float | None = None,
    ) -> tuple[RelayResponse, ollama.Reader | None]:
        """The upstream's head is here (it arrived at `arrived`, or now): fill the Exchange,
        fire `response_headers`, and make the client's response (not yet prepared) and the
        reader for the body."""
        reader = self.note_reply(status, headers, arrived)
        resp = self.response = RelayResponse(status=status, reason=reason)
        resp.headers.extend(downstream_headers(headers))
        return resp, reader

    def note_reply(
        self, status: int, headers: CIMultiDictProxy[str], arrived: float | None = None
    ) -> ollama.Reader | None:
        """Fill the Exchange from the reply's head, fire `response_headers`, and return the
        reader for the body."""
        reader = self.note_head(status, headers, arrived)
        self.announce_reply()
        return reader

    def note_head(
        self, status: int, headers: CIMultiDictProxy[str], arrived: float | None = None
    ) -> ollama.Reader | None:
        """Fill the Exchange from the reply's head (which arrived at `arrived`, or now); the
        reader for the body."""
        ex = self.ex
        ex.response_started = arrived or time.monotonic()
        ex.status = status
        ex.response_headers = dict(headers)
        ex.content_type = headers.get(hdrs.CONTENT_TYPE, "")
        ex.streamed = ollama.is_streamed(ex.content_type)
        return ollama.reader_for(ex, self.fwd.settings.reply_tee_limit)

    def announce_reply(self) -> None:
        """Fire `request` (if the request side has not yet) and `response_headers`."""
        self.fire_request()
        self.hooks.response_headers(self.ex)

    def read_piece(self, reader: ollama.Reader | None, data: bytes, at: float) -> None:
        """Bytes written to the client at `at`: count them and let the reader see them."""
        self.ex.response_bytes += len(data)
        if reader is not None:
            self.outputs(reader.feed(data, at))

    async def end_reply(
        self, resp: RelayResponse, reader: ollama.Reader | None, cut: BaseException | None
    ) -> web.StreamResponse:
        """The upstream's body ended (`cut`: abnormally): end the client's reply the same
        way, let the reader finish, and end the exchange."""
        if cut is not None:
            self.end_cut(reader, cut)
            return resp
        at = time.monotonic()
        try:
            await resp.write_eof()
        except ConnectionResetError:
            self.finish(Outcome.CLIENT_DISCONNECTED)
            return resp
        written = time.monotonic()
        self.close_reader(reader, at)
        self.finish(ollama.outcome_of(self.ex, reader), written)
        return resp

    async def relay(self, up: aiohttp.ClientResponse) -> web.StreamResponse:
        resp, reader = self.begin_reply(up.status, up.reason, up.headers)
        try:
            await resp.prepare(self.request)
            async for data in up.content.iter_any():
                await resp.write(data)
                self.read_piece(reader, data, time.monotonic())
        except ConnectionResetError:
            self.finish(Outcome.CLIENT_DISCONNECTED)
            return resp
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError) as exc:
            return await self.end_reply(resp, reader, exc)
        return await self.end_reply(resp, reader, None)

    def end_cut(self, reader: ollama.Reader | None, cut: BaseException) -> None:
        """The upstream cut its reply: cut the client's connection the same way, so the
        client sees the truncated reply a direct connection would have given it."""
        self.ex.error_message = self.ex.error_message or f"upstream cut the reply: {cut!r}"
        self.abort_client()
        self.close_reader(reader, time.monotonic())
        # A stream that already brought its final object (or an error line) ends as that
        # says: DESIGN's `incomplete` is a stream without its end, and the client has every
        # line. Any other cut reply, a single JSON one included, is incomplete.
        ended = reader is not None and self.ex.streamed and (reader.complete or reader.errored)
        self.finish(ollama.outcome_of(self.ex, reader) if ended else Outcome.INCOMPLETE)

    def close_reader(self, reader: ollama.Reader | None, at: float) -> None:
        """Let the reader finish at EOF. A large single reply is parsed right here: orjson
        holds the GIL, so a thread would stall the loop all the same, and awaiting it would
        open a window for a cancellation between the last byte and the exchange's end."""
        if reader is not None:
            self.outputs(reader.close(at))

    def outputs(self, pieces: list[OutputChunk]) -> None:
        if not pieces:
            return
        self.ex.note_outputs(pieces)
        if self.hooks.wants_chunks:
            self.hooks.chunks(self.ex, pieces)

    def client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def abort_client(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    async def unreachable(self, exc: BaseException, broken_off: bool) -> web.StreamResponse:
        """The proxy's 502 or 504 when the upstream gave no reply: no connection, no answer
        in time, or (`broken_off`) a connection that ended without a valid reply."""
        fwd = self.fwd
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            status, message = (
                504,
                (
                    f"ollama-tap: Ollama at {fwd.upstream} did not answer in time ({reason}); "
                    "check that it is running, or raise --connect-timeout / --read-timeout."
                ),
            )
        elif broken_off:
            # Connected, but what came back was no reply: "cannot reach" would send the
            # operator looking for a stopped Ollama instead of a crashed one.
            status, message = (
                502,
                (
                    f"ollama-tap: Ollama at {fwd.upstream} broke off the exchange without a "
                    f"valid reply ({_broken_reason(exc)}); check its log, "
                    "or what else listens there."
                ),
            )
        else:
            status, message = (
                502,
                (
                    f"ollama-tap: cannot reach Ollama at {fwd.upstream}: {reason}; "
                    "start Ollama or point --upstream / OLLAMA_TAP_UPSTREAM at it."
                ),
            )
        return await self.proxy_error(status, message, Outcome.UPSTREAM_UNREACHABLE)

    async def proxy_error(self, status: int, message: str, outcome: Outcome) -> web.Response:
        self.fire_request()
        ex = self.ex
        ex.status = status
        ex.error_message = message
        family = ollama.family_of(ex.endpoint)
        body = ollama.error_body(family, status, message)
        resp = web.Response(status=status, body=body, content_type="application/json")
        ex.response_bytes = len(body)
        log.warning("upstream_failed", id=ex.id, path=ex.path, status=status, error=message)
        self.finish(outcome)
        return resp

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        """End the exchange once: stamp it (`at`, when its last byte was written; else
        now) and fire `response` or `error`."""
        if self.ended:
            return
        self.ended = True
        if self.upstream is not None:
            # Closing (not releasing) the upstream connection is how Ollama learns the
            # client is gone and stops generating.
            self.upstream.close()
        self.fire_request()
        self.ex.outcome = outcome
        self.ex.ended = at or time.monotonic()
        self.hooks.end(self.ex)


class _TeedBody:
    """A request body as it streams in, teed on its way; the `request` hook fires at its
    end. An iterator rather than an async generator: mypyc compiles no async generators."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.pieces = relay.request.content.iter_any().__aiter__()

    def __aiter__(self) -> _TeedBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self.pieces.__anext__()
        except StopAsyncIteration:
            self.relay.fire_request()
            raise
        self.relay.tee_piece(data)
        return data

"""The exchange driver both transports hold: Tap, one per app, and Tapped, one per exchange.

A transport moves the bytes; it makes a `Tapped` for each request and calls it at each step
(request body teed, reply head, body pieces written, end). `Tapped` fills the Exchange and
fires the hooks, so every transport gives observers the same contract (proxy/hooks.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

import structlog
from aiohttp import hdrs
from multidict import CIMultiDictProxy

from proxy import ollama
from proxy.config import Settings
from proxy.exchange import Exchange, Outcome, OutputChunk
from proxy.hooks import Hooks
from proxy.relay.failures import INTERNAL_ERROR, ClientGone
from proxy.relay.headers import UpstreamTarget
from proxy.relay.incoming import BodySource, Incoming

log = structlog.get_logger("ollama_tap.relay")

R = TypeVar("R", covariant=True)


class Relay(Protocol[R]):
    """What a transport's per-exchange relay offers the driver; `R` is what its server
    wants back from a handler."""

    tapped: Tapped

    async def run(self) -> R: ...

    def reply_started(self) -> bool:
        """Whether the client has been sent a response head (an error can only cut it)."""
        ...

    def abort_client(self) -> None: ...

    def finish(self, outcome: Outcome, at: float | None = None) -> None: ...

    async def proxy_error(self, status: int, message: str, outcome: Outcome) -> R: ...


class Tap:
    """The per-app half: settings, hooks, where requests go, what is in flight, shutdown."""

    def __init__(self, settings: Settings, hooks: Hooks) -> None:
        self.settings = settings
        self.hooks = hooks
        self.target = UpstreamTarget(settings.upstream_url)
        self.shutting_down = False
        """Set when shutdown begins: an exchange cancelled from then on ends as `shutdown`."""
        self._in_flight: set[asyncio.Task[Any]] = set()

    async def drive(self, relay: Relay[R]) -> R:
        """Run one exchange to its end; whatever happens, it ends once with an outcome."""
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        try:
            return await relay.run()
        except asyncio.CancelledError:
            relay.finish(Outcome.SHUTDOWN if self.shutting_down else Outcome.CLIENT_DISCONNECTED)
            raise
        except ClientGone as exc:
            # The request broke off on the client's side (it left, or its body's framing
            # did not parse; the transport logged which): the client's doing, not a bug.
            ex = relay.tapped.ex
            log.info("client_request_broken", id=ex.id, path=ex.path, error=str(exc))
            relay.abort_client()
            relay.finish(Outcome.CLIENT_DISCONNECTED)
            raise
        except Exception:
            ex = relay.tapped.ex
            log.exception("relay_failed", id=ex.id, path=ex.path)
            if relay.reply_started():
                relay.abort_client()
                relay.finish(Outcome.PROXY_ERROR)
                raise
            return await relay.proxy_error(500, INTERNAL_ERROR, Outcome.PROXY_ERROR)

    def shut_down(self, grace: float) -> None:
        """Shutdown begins: every exchange still in flight `grace` seconds from now is
        cancelled (aiohttp's own shutdown would wait its timeout twice for a handler that
        reads the upstream and never notices; cancelling here keeps it to `grace`)."""
        self.shutting_down = True
        asyncio.get_running_loop().call_later(grace, self._cancel_all)

    def _cancel_all(self) -> None:
        for task in list(self._in_flight):
            task.cancel()


class Tapped:
    """The per-exchange half: the Exchange, the request body's tee, the reply's reader, and
    the hooks fired at each step, each once."""

    def __init__(self, tap: Tap, incoming: Incoming) -> None:
        self.hooks = tap.hooks
        self.body_tee_limit = tap.settings.body_tee_limit
        self.reply_tee_limit = tap.settings.reply_tee_limit
        url = incoming.rel_url
        arrived = incoming.arrived
        ex = self.ex = Exchange(
            method=incoming.method,
            path=url.path,
            query=url.query_string,
            endpoint=ollama.endpoint_of(url.raw_path),
            client=incoming.remote,
            request_headers=dict(incoming.headers),
            started=arrived,
            started_wall=time.time() - (time.monotonic() - arrived),
        )
        self.tee = ollama.tees_request_body(
            ex.endpoint, incoming.headers.get(hdrs.CONTENT_TYPE, "")
        )
        self.tee_buf: bytearray | None = bytearray() if self.tee else None
        self.content = incoming.content
        self.has_body = incoming.has_body
        self.reader: ollama.Reader | None = None
        self.request_fired = False
        self.ended = False

    # -- the request --------------------------------------------------------------------

    async def upload(self) -> bytes | AsyncIterator[bytes] | None:
        """What to send upstream: nothing, the body at hand, or the body as it streams in.

        A body that arrived whole with the request head (every small JSON request) goes in
        one write: nothing is held back. The `request` hook fires when a streamed body ends;
        for the other two the transport fires it once the request is on its way
        (`fire_request`), so parsing and observers do not delay it.
        """
        content = self.content
        if not self.has_body:
            return None
        if content.is_eof():
            data = await content.read()
            self.tee_piece(data)
            return data
        return TeedBody(self, content)

    def tee_piece(self, data: bytes) -> None:
        self.ex.request_bytes += len(data)
        if self.tee_buf is not None:
            if len(self.tee_buf) + len(data) <= self.body_tee_limit:
                self.tee_buf += data
            else:
                self.tee_buf = None

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

    # -- the reply ----------------------------------------------------------------------

    def reply_head(
        self, status: int, headers: CIMultiDictProxy[str], arrived: float | None = None
    ) -> None:
        """Fill the Exchange from the reply's head (which arrived at `arrived`, or now) and
        choose the reader for its body. The hooks hear of it in `announce`."""
        ex = self.ex
        ex.response_started = arrived or time.monotonic()
        ex.status = status
        ex.response_headers = dict(headers)
        ex.content_type = headers.get(hdrs.CONTENT_TYPE, "")
        ex.streamed = ollama.is_streamed(ex.content_type)
        self.reader = ollama.reader_for(ex, self.reply_tee_limit)

    def announce(self) -> None:
        """Fire `request` (if the request side has not yet) and `response_headers`."""
        self.fire_request()
        self.hooks.response_headers(self.ex)

    def read_piece(self, data: bytes, at: float) -> None:
        """Bytes written to the client at `at`: count them and let the reader see them."""
        self.ex.response_bytes += len(data)
        reader = self.reader
        if reader is not None:
            self.outputs(reader.feed(data, at))

    def close_reader(self, at: float) -> None:
        """Let the reader finish at EOF. A large single reply is parsed right here: orjson
        holds the GIL, so a thread would stall the loop all the same, and awaiting it would
        open a window for a cancellation between the last byte and the exchange's end."""
        if self.reader is not None:
            self.outputs(self.reader.close(at))

    def outputs(self, pieces: list[OutputChunk]) -> None:
        if not pieces:
            return
        self.ex.note_outputs(pieces)
        if self.hooks.wants_chunks:
            self.hooks.chunks(self.ex, pieces)

    def outcome(self) -> Outcome:
        """How the reply that was relayed to its end ended."""
        return ollama.outcome_of(self.ex, self.reader)

    def cut(self, cut: BaseException) -> Outcome:
        """The upstream cut its reply (the transport cut the client's the same way): let the
        reader finish; the outcome to end with."""
        self.ex.error_message = self.ex.error_message or f"upstream cut the reply: {cut!r}"
        self.close_reader(time.monotonic())
        # A stream that already brought its final object (or an error line) ends as that
        # says: `incomplete` is a stream without its end, and the client has every line.
        # Any other cut reply, a single JSON one included, is incomplete.
        reader = self.reader
        ended = reader is not None and self.ex.streamed and (reader.complete or reader.errored)
        return self.outcome() if ended else Outcome.INCOMPLETE

    def proxy_error(self, status: int, message: str) -> bytes:
        """The body of a response the proxy makes itself, in the route family's error shape;
        the Exchange records it. The transport sends it, then ends the exchange."""
        self.fire_request()
        ex = self.ex
        ex.status = status
        ex.error_message = message
        body = ollama.error_body(ollama.family_of(ex.endpoint), status, message)
        ex.response_bytes = len(body)
        log.warning("upstream_failed", id=ex.id, path=ex.path, status=status, error=message)
        return body

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        """End the exchange once: stamp it (`at`, when its last byte was written; else
        now) and fire `response` or `error`."""
        if self.ended:
            return
        self.ended = True
        self.fire_request()
        self.ex.outcome = outcome
        self.ex.ended = at or time.monotonic()
        self.hooks.end(self.ex)


class TeedBody:
    """A request body as it streams in, teed on its way; the `request` hook fires at its
    end. An iterator rather than an async generator (see docs/architecture.md, mypyc)."""

    def __init__(self, tapped: Tapped, content: BodySource) -> None:
        self.tapped = tapped
        self.pieces = content.iter_any().__aiter__()

    def __aiter__(self) -> TeedBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self.pieces.__anext__()
        except StopAsyncIteration:
            self.tapped.fire_request()
            raise
        self.tapped.tee_piece(data)
        return data

"""The exchange driver both transports hold: Tap, one per app, and Tapped, one per exchange.

A transport moves the bytes; it makes a `Tapped` for each request and calls it at each step
(request body teed, reply head, body pieces written, end). `Tapped` fills the Exchange and
fires the hooks, so every transport gives observers the same contract (ollama_tap/hooks.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol, TypeVar

import structlog
from aiohttp import hdrs
from multidict import CIMultiDictProxy

from ollama_tap import ollama, tracecontext
from ollama_tap.config import Settings
from ollama_tap.credentials import redacted_path
from ollama_tap.exchange import Exchange, Outcome, OutputChunk
from ollama_tap.hooks import Hooks
from ollama_tap.relay.failures import INTERNAL_ERROR, ClientGone
from ollama_tap.relay.headers import target_of
from ollama_tap.relay.incoming import BodySource, Incoming

log = structlog.get_logger("ollama_tap.relay")

R = TypeVar("R", covariant=True)

REST_OF_BODY_SECONDS: Final = 10.0
"""How long the rest of an upload that the upstream answered before it ended is read, for
the record, before the exchange ends without it (aiohttp's lingering time)."""


class Relay(Protocol[R]):
    """What a transport's per-exchange relay offers the driver; `R` is what its server
    wants back from a handler."""

    tapped: Tapped

    async def run(self) -> R: ...

    # Whether the client has been sent a response head (an error can only cut it).
    def reply_started(self) -> bool: ...

    def abort_client(self) -> None: ...

    def finish(self, outcome: Outcome, at: float | None = None) -> None: ...

    async def proxy_error(self, status: int, message: str, outcome: Outcome) -> R: ...


class Tap:
    """The per-app half: settings, hooks, where requests go, what is in flight, shutdown."""

    def __init__(self, settings: Settings, hooks: Hooks) -> None:
        self.settings = settings
        self.hooks = hooks
        self.target = target_of(settings)
        self.shutting_down = False
        """Set when shutdown begins: an exchange cancelled from then on ends as `shutdown`."""
        self._in_flight: set[asyncio.Task[Any]] = set()

    async def drive(self, relay: Relay[R]) -> R:
        """Run one exchange to its end; whatever happens, it ends once with an outcome."""
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        tapped = relay.tapped
        try:
            result = await self._run(relay)
            await tapped.settle()
            return result
        finally:
            tapped.end()  # cancelled, or failed, while the rest of its upload was awaited

    async def _run(self, relay: Relay[R]) -> R:
        try:
            return await relay.run()
        except asyncio.CancelledError:
            # The client left (aiohttp and the HTTP/1 front cancel its task) or the proxy
            # is stopping.
            gone = Outcome.SHUTDOWN if self.shutting_down else Outcome.CLIENT_DISCONNECTED
            relay.finish(*relay.tapped.left(gone))
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

    def in_flight(self) -> int:
        return len(self._in_flight)

    def shut_down(self, grace: float) -> None:
        """Shutdown begins: every exchange still in flight `grace` seconds from now is
        cancelled (aiohttp's own shutdown would wait its timeout twice for a handler that
        reads the upstream and never notices; cancelling here keeps it to `grace`)."""
        self.shutting_down = True
        asyncio.get_running_loop().call_later(grace, self.stop_now)

    def stop_now(self) -> None:
        """Cancel every exchange in flight; each ends as `shutdown`."""
        self.shutting_down = True
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
            path=redacted_path(url.path),  # as recorded and logged
            query=url.query_string,
            endpoint=ollama.endpoint_of(url.raw_path),
            client=incoming.remote,
            request_headers=dict(incoming.headers),
            started=arrived,
            started_wall=time.time() - (time.monotonic() - arrived),
        )
        if tap.target.propagates:
            ex.metadata[tracecontext.METADATA_KEY] = tracecontext.ids_of(incoming)
        self.tee = ollama.tees_request_body(
            ex.endpoint, incoming.headers.get(hdrs.CONTENT_TYPE, "")
        )
        self.tee_buf: bytearray | None = bytearray() if self.tee else None
        self.content = incoming.content
        self.has_body = incoming.has_body
        self.reader: ollama.Reader | None = None
        self.last_write: float | None = None
        """When the last body piece was written to the client."""
        self.streaming: TeedBody | None = None
        """The body as it streams in, when it did not come whole with the head."""
        self.request_fired = False
        self.ended = False
        """`finish` was called: how the exchange ended is known (`settled`)."""
        self.settled: tuple[Outcome, float] | None = None
        self.told = False
        """The end hook fired (`end`)."""

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
        self.streaming = TeedBody(self, content)
        return self.streaming

    def tee_piece(self, data: bytes) -> None:
        self.ex.request_bytes += len(data)
        if self.tee_buf is not None:
            if len(self.tee_buf) + len(data) <= self.body_tee_limit:
                self.tee_buf += data
            else:
                self.tee_buf = None

    def sent_so_far(self) -> bytes | None:
        """Every request-body byte read so far, if the tee still holds them all: what a
        second send must write again (relay/retry.py); None when they are not at hand."""
        ex = self.ex
        if not ex.request_bytes:
            return b""
        held = bytes(self.tee_buf) if self.tee_buf is not None else ex.request_body
        return held if held is not None and len(held) == ex.request_bytes else None

    def fire_request(self) -> None:
        """Parse the teed body and fire the request hook (once)."""
        if self.request_fired:
            return
        self.request_fired = True
        self.parse_body()
        self.hooks.request(self.ex)

    def parse_body(self) -> None:
        """Fill the Exchange's request fields from the teed body. A body still streaming in
        (the upstream answered first) keeps being teed, and is parsed again at its end or
        at the exchange's (`body_ended`, `end`): the record gets what arrived."""
        if not self.tee:
            return
        ex, buf = self.ex, self.tee_buf
        body = bytes(buf) if buf is not None else b""
        ex.request_body = body if buf is not None else None
        ex.request = ollama.parse_request_fields(body, buf is None)
        if not self.body_open():
            self.tee_buf = None  # the Exchange holds the one copy from here on

    def body_open(self) -> bool:
        """Whether the request body is still streaming in."""
        return self.streaming is not None and not self.streaming.done

    def body_ended(self) -> None:
        if self.request_fired:
            self.parse_body()  # the reply came first: now the fields of the whole body
        else:
            self.fire_request()

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
        self.last_write = at
        raw = self.ex.raw_reply  # kept for the recorder in full mode, else None
        if raw is not None and not raw.add(data, at):
            self.ex.raw_reply = None  # over its limit: the rest of the reply costs nothing
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
        if pieces:
            self.ex.note_outputs(pieces)
            if self.hooks.wants_chunks:
                self.hooks.chunks(self.ex, pieces)

    def outcome(self) -> Outcome:
        """How the reply that was relayed to its end ended."""
        return ollama.outcome_of(self.ex, self.reader)

    def answered(self) -> bool:
        """Whether the client has its whole answer before the reply's end: a stream whose
        final object or terminal event (or an error line) was relayed. Any other reply,
        a single JSON one included, is whole only at its end."""
        reader = self.reader
        return reader is not None and self.ex.streamed and (reader.complete or reader.errored)

    def cut(self, cut: BaseException) -> Outcome:
        """The upstream cut its reply (the transport cut the client's the same way): let the
        reader finish; the outcome to end with."""
        self.ex.error_message = self.ex.error_message or f"upstream cut the reply: {cut!r}"
        self.close_reader(time.monotonic())
        # `incomplete` is a stream without its end; one cut after it ends as it says.
        return self.outcome() if self.answered() else Outcome.INCOMPLETE

    def left(self, otherwise: Outcome) -> tuple[Outcome, float | None]:
        """How an exchange ends whose client went away (or that the proxy stopped) before
        the reply's end, and when: a stream the client had whole (many clients close at
        `done:true` or `[DONE]`, before the upstream's end of body) as it says, at its last
        write; any other as `otherwise`, now."""
        if self.answered():
            return self.outcome(), self.last_write
        return otherwise, None

    def proxy_error(self, status: int, message: str) -> bytes:
        """The body of a response the proxy makes itself, in the route family's error shape;
        the Exchange records it. The transport sends it, then ends the exchange."""
        self.fire_request()
        ex = self.ex
        ex.status, ex.error_message = status, message
        body = ollama.error_body(ollama.family_of(ex.endpoint), status, message)
        ex.response_bytes = len(body)
        log.warning("upstream_failed", id=ex.id, path=ex.path, status=status, error=message)
        return body

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        """Settle how the exchange ended, once (`at`, when its last byte was written; else
        now), and end it: at once, unless the upstream answered before the request body
        ended, whose rest is then read for the record first (`settle`)."""
        if self.ended:
            return
        self.ended = True
        self.settled = (outcome, at or time.monotonic())
        if not self.awaits_body():
            self.end()

    def awaits_body(self) -> bool:
        """Whether the exchange waits for the rest of a request body it tees."""
        return self.body_open() and self.tee_buf is not None and not self.told

    async def settle(self) -> None:
        """Read the rest of a body the upstream answered before it ended (teed, not sent),
        then end the exchange. The client's reply is out: only the exchange's end waits."""
        if self.settled is not None and self.awaits_body():
            await self.read_rest()
        self.end()

    async def read_rest(self) -> None:
        """Read (and tee) the rest of a body still streaming in, for the record (its model
        above all), for at most REST_OF_BODY_SECONDS and up to the tee limit."""
        body = self.streaming
        if body is None or not self.body_open() or self.tee_buf is None:
            return
        try:
            async with asyncio.timeout(REST_OF_BODY_SECONDS):
                await body.rest()
        except Exception as exc:  # the client stopped sending, or went: keep what came
            log.debug("upload_rest_unread", id=self.ex.id, error=repr(exc))

    def end(self) -> None:
        """Fire `response` or `error` for an exchange that settled, once."""
        if self.told or self.settled is None:
            return
        self.told = True
        if self.tee_buf is not None and self.request_fired:
            self.parse_body()  # the rest of an early-answered upload came since
        self.fire_request()
        self.ex.outcome, self.ex.ended = self.settled
        self.hooks.end(self.ex)


class TeedBody:
    """A request body as it streams in, teed on its way; the `request` hook fires at its
    end. An iterator rather than an async generator (see docs/architecture.md, mypyc)."""

    def __init__(self, tapped: Tapped, content: BodySource) -> None:
        self.tapped = tapped
        self.pieces = content.iter_any().__aiter__()
        self.done = False
        self.pulling = False
        """A read of the source is under way (a body source takes one reader at a time)."""
        self._unwound: asyncio.Future[None] | None = None

    def __aiter__(self) -> TeedBody:
        return self

    async def __anext__(self) -> bytes:
        self.pulling = True
        try:
            data = await self.pieces.__anext__()
        except StopAsyncIteration:
            self.done = True
            self.tapped.body_ended()
            raise
        finally:
            self.pulling = False
            if self._unwound is not None and not self._unwound.done():
                self._unwound.set_result(None)
        self.tapped.tee_piece(data)
        return data

    async def rest(self) -> None:
        """Read (and tee) what is left, once the upload that read it has stopped; until the
        end or the tee limit."""
        if self.pulling:  # the upload's read, cancelled, unwinds on the loop's next turns
            self._unwound = asyncio.get_running_loop().create_future()
            await self._unwound
        async for _ in self:
            if self.tapped.tee_buf is None:
                return

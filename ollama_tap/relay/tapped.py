"""One exchange's life, in named stages: `Tapped` fills the Exchange and fires the hooks,
each once and in order, as the driver (tap.py) advances it.

    ARRIVED -> REQUESTED -> HEADERS -> SETTLED -> ENDED

A stage is only ever left forwards, by `advance`. REQUESTED comes at the first of: the
request on its way, the reply's head, a streamed body's end, the settling. HEADERS is skipped
when no reply came (or none reached the client, and the head was not taken whole). Anything
else (a second settling, a head after the end) is a bug of the proxy's, raised as
`StageError`.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

import structlog
from aiohttp import hdrs
from multidict import CIMultiDict, CIMultiDictProxy

from ollama_tap import ollama, tracecontext
from ollama_tap.config import Settings
from ollama_tap.credentials import redacted_path
from ollama_tap.exchange import Exchange, Outcome, OutputChunk
from ollama_tap.hooks import Hooks
from ollama_tap.relay.bodies import TeedBody, Upload
from ollama_tap.relay.failures import StageError
from ollama_tap.relay.headers import UpstreamTarget
from ollama_tap.relay.incoming import Incoming

log = structlog.get_logger("ollama_tap.relay")


class Guard(Protocol):
    """The reload guard as the relay uses it (ollama_tap/guard.py)."""

    def covers(self, method: str, raw_path: str) -> bool: ...

    def rewrite(self, ex: Exchange, body: bytes, residency: Any = None) -> bytes: ...


REST_OF_BODY_SECONDS: Final = 10.0
"""How long the rest of an upload that the upstream answered before it ended is read, for
the record, before the exchange ends without it (aiohttp's lingering time)."""


class Stage(enum.IntEnum):
    """Where an exchange is in its life (the hook each stage fired, or what it settled)."""

    ARRIVED = 0
    """The request head arrived: the Exchange exists, no hook fired yet."""
    REQUESTED = 1
    """`request` fired: the request is on its way (or was answered, or never went)."""
    HEADERS = 2
    """`response_headers` fired: the reply's head is on ex (normally once it went out)."""
    SETTLED = 3
    """How it ended is known (`outcome`, `settled_at`); the end hook may still wait for the
    rest of an upload that the upstream answered early (`finish`)."""
    ENDED = 4
    """`response` or `error` fired."""


class Tapped:
    """The per-exchange half of the driver: the Exchange, the request body's tee, the
    reply's reader, and the hooks fired at each stage."""

    def __init__(
        self,
        settings: Settings,
        hooks: Hooks,
        target: UpstreamTarget,
        incoming: Incoming,
        guard: Guard | None = None,
    ) -> None:
        self.hooks = hooks
        self.body_tee_limit = settings.body_tee_limit
        self.reply_tee_limit = settings.reply_tee_limit
        url = incoming.rel_url
        self.raw_path_qs = url.raw_path_qs
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
        if target.propagates:
            ex.propagated = tracecontext.ids_of(incoming)
        self.tee = ollama.tees_request_body(
            ex.endpoint, incoming.headers.get(hdrs.CONTENT_TYPE, "")
        )
        self.tee_buf: bytearray | None = bytearray() if self.tee else None
        self.guard = (
            guard
            if guard is not None and self.tee and guard.covers(incoming.method, url.raw_path)
            else None
        )
        """The reload guard, when it is on and may rewrite this request's body."""
        self.routed = False
        """Several boxes (`route`): the router reads the body's model, so a body that the
        head says fits the tee is read whole before it is routed, and the guard rewrites it
        once routed (`guard_for`), for that box's runner."""
        self.length: int | None = None
        """With several boxes, the body's Content-Length (llhttp framed the body by it), None
        when chunked (`route`)."""
        self.parsed = False
        """The whole body was parsed (it is on the Exchange)."""
        self.content = incoming.content
        self.has_body = incoming.has_body
        self.reader: ollama.Reader | None = None
        self.last_write: float | None = None
        """When the last body piece was written to the client."""
        self.streaming: TeedBody | None = None
        """The body as it streams in, when it did not come whole with the head."""
        self.stage = Stage.ARRIVED
        self.outcome = Outcome.OK
        """How the exchange ended, from SETTLED on."""
        self.settled_at = 0.0

    def advance(self, to: Stage) -> None:
        """The one transition: forwards only."""
        if to <= self.stage:
            raise StageError(
                f"exchange {self.ex.id} ({self.ex.path}) cannot go to {to.name} from "
                f"{self.stage.name}"
            )
        self.stage = to

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
            if self.guard is not None and not self.routed and len(data) <= self.body_tee_limit:
                data = self.guard.rewrite(self.ex, data)
            self.tee_piece(data)
            return data
        if self.guard is not None or self.routes_whole():
            return await self.whole_upload()
        self.streaming = TeedBody(self, content)
        return self.streaming

    def route(self, headers: CIMultiDictProxy[str]) -> None:
        """Several boxes: the router decides where the request goes, from its body."""
        self.routed = True
        length = headers.get(hdrs.CONTENT_LENGTH, "")
        self.length = int(length) if length.isdigit() else None

    def routes_whole(self) -> bool:
        """Whether a body still streaming in is read whole before its exchange is routed:
        with several boxes, a teed body whose Content-Length fits the tee (the model is read
        from the whole object, and Ollama reads the whole body before it acts). A longer
        body, or a chunked one, streams, routed before its model is known (docs/boxes.md)."""
        length = self.length
        return self.routed and self.tee and length is not None and length <= self.body_tee_limit

    async def whole_upload(self) -> bytes | AsyncIterator[bytes]:
        """A body the reload guard may rewrite, or the router route, streaming in: read whole
        first (both read the whole object), up to the tee limit; a longer one goes on
        streaming, as it came, the bytes read so far first."""
        pieces: list[bytes] = []
        size = 0
        async for data in self.content.iter_any():
            pieces.append(data)
            size += len(data)
            if size > self.body_tee_limit:
                self.tee_piece(b"".join(pieces))  # past the limit: the tee gives up
                self.streaming = TeedBody(self, self.content)
                return Upload(self.streaming, b"".join(pieces))
        data = b"".join(pieces)
        if self.guard is not None and not self.routed:
            data = self.guard.rewrite(self.ex, data)
        self.tee_piece(data)
        return data

    def guard_for(self, data: bytes, residency: Any) -> bytes:
        """`data` (the whole body, read and teed) as it goes to the routed box: rewritten
        for that box's runner when the guard covers it; the tee and the parsed fields then
        hold what goes."""
        if self.guard is None or len(data) > self.body_tee_limit:
            return data
        sent = self.guard.rewrite(self.ex, data, residency)
        if sent is not data:
            self.ex.request_bytes = 0
            self.tee_buf = bytearray() if self.tee else None
            self.parsed = False
            self.tee_piece(sent)
            self.parse_body()
        return sent

    def tee_piece(self, data: bytes) -> None:
        self.ex.request_bytes += len(data)
        if self.tee_buf is not None:
            if len(self.tee_buf) + len(data) <= self.body_tee_limit:
                self.tee_buf += data
            else:
                self.tee_buf = None

    def tee_full(self) -> bool:
        """Whether the tee gave up (the body passed its limit): nothing more is kept."""
        return self.tee_buf is None

    def sent_so_far(self) -> bytes | None:
        """Every request-body byte read so far, if the tee still holds them all: what a
        second send must write again (relay/retry.py); None when they are not at hand."""
        ex = self.ex
        if not ex.request_bytes:
            return b""
        held = bytes(self.tee_buf) if self.tee_buf is not None else ex.request_body
        return held if held is not None and len(held) == ex.request_bytes else None

    def fire_request(self) -> None:
        """Parse the teed body and fire the request hook, unless it fired already (the
        request is on its way, the reply's head came, a streamed body ended: whichever is
        first)."""
        if self.stage >= Stage.REQUESTED:
            return
        self.advance(Stage.REQUESTED)
        self.parse_body()
        self.hooks.request(self.ex)

    def parse_body(self) -> None:
        """Fill the Exchange's request fields from the teed body. A body still streaming in
        (the upstream answered first) keeps being teed, and is parsed again at its end or
        at the exchange's (`body_ended`, `end`): the record gets what arrived."""
        if not self.tee or self.parsed:
            return
        ex, buf = self.ex, self.tee_buf
        body = bytes(buf) if buf is not None else b""
        ex.request_body = body if buf is not None else None
        ex.request = ollama.parse_request_fields(body, buf is None)
        if not self.body_open():
            self.tee_buf = None  # the Exchange holds the one copy from here on
            self.parsed = True  # the router parsed it before the request hook

    def body_open(self) -> bool:
        """Whether the request body is still streaming in."""
        return self.streaming is not None and not self.streaming.done

    def body_ended(self) -> None:
        if self.stage >= Stage.REQUESTED:
            self.parse_body()  # the reply came first: now the fields of the whole body
        else:
            self.fire_request()

    # -- the reply ----------------------------------------------------------------------

    def reply_head(
        self, status: int, headers: CIMultiDictProxy[str], arrived: float | None = None
    ) -> None:
        """Fill the Exchange from the reply's head (which arrived at `arrived`, or now),
        choose the reader for its body, and fire `request` (if the request side has not
        yet) and `response_headers`."""
        ex = self.ex
        ex.response_started = arrived or time.monotonic()
        ex.status = status
        ex.response_headers = dict(headers)
        ex.content_type = headers.get(hdrs.CONTENT_TYPE, "")
        ex.streamed = ollama.is_streamed(ex.content_type)
        self.reader = ollama.reader_for(ex, self.reply_tee_limit)
        self.fire_request()
        self.advance(Stage.HEADERS)
        self.hooks.response_headers(ex)

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

    def reply_outcome(self) -> Outcome:
        """How the reply that was relayed to its end ended."""
        return ollama.outcome_of(self.ex, self.reader)

    def answered(self) -> bool:
        """Whether the client has its whole answer before the reply's end: a stream whose
        final object or terminal event (or an error line) was relayed. Any other reply,
        a single JSON one included, is whole only at its end."""
        reader = self.reader
        return reader is not None and self.ex.streamed and (reader.complete or reader.errored)

    def cut(self, cut: BaseException) -> Outcome:
        """The upstream cut its reply: let the reader finish; the outcome to end with."""
        self.ex.error_message = self.ex.error_message or f"upstream cut the reply: {cut!r}"
        self.close_reader(time.monotonic())
        # `incomplete` is a stream without its end; one cut after it ends as it says.
        return self.reply_outcome() if self.answered() else Outcome.INCOMPLETE

    def left(self, otherwise: Outcome) -> tuple[Outcome, float | None]:
        """How an exchange ends whose client went away (or that the proxy stopped) before
        the reply's end, and when: a stream the client had whole (many clients close at
        `done:true` or `[DONE]`, before the upstream's end of body) as it says, at its last
        write; any other as `otherwise`, now."""
        if self.answered():
            return self.reply_outcome(), self.last_write
        return otherwise, None

    def answered_by_proxy(self, status: int, content_type: str, body: bytes) -> None:
        """The proxy wrote this whole answer itself just now (several boxes: a listing of
        every box's): the Exchange and the hooks take it as a reply of that body."""
        now = time.monotonic()
        head = {hdrs.CONTENT_TYPE: content_type, hdrs.CONTENT_LENGTH: str(len(body))}
        self.reply_head(status, CIMultiDictProxy(CIMultiDict(head)), now)
        self.read_piece(body, now)
        self.close_reader(now)

    def proxy_error(self, status: int, message: str) -> bytes:
        """The body of a response the proxy makes itself, in the route family's error shape;
        the Exchange records it."""
        self.fire_request()
        ex = self.ex
        ex.status, ex.error_message = status, message
        body = ollama.error_body(ollama.family_of(ex.endpoint), status, message)
        ex.response_bytes = len(body)
        log.warning("upstream_failed", id=ex.id, path=ex.path, status=status, error=message)
        return body

    # -- the end ------------------------------------------------------------------------

    def settle(self, outcome: Outcome, at: float | None = None) -> None:
        """How the exchange ended (`at`, when its last byte was written; else now), once.
        `request` fires now if it has not: with what of a streamed body arrived, completed
        at the end. The exchange ends at once, unless the upstream answered before the
        request body ended, whose rest is read for the record first (`finish`)."""
        self.fire_request()
        self.advance(Stage.SETTLED)
        self.outcome, self.settled_at = outcome, at or time.monotonic()
        if not self.awaits_body():
            self.end()

    def awaits_body(self) -> bool:
        """Whether the exchange waits for the rest of a request body it tees."""
        return self.body_open() and self.tee_buf is not None

    async def finish(self) -> None:
        """Read the rest of a body the upstream answered before it ended (teed, not sent),
        then end the exchange. The client's reply is out: only the exchange's end waits."""
        if self.stage is Stage.SETTLED:
            await self.read_rest()
            self.end()

    async def read_rest(self) -> None:
        """Read (and tee) the rest of a body still streaming in, for the record (its model
        above all), for at most REST_OF_BODY_SECONDS and up to the tee limit."""
        body = self.streaming
        if body is None or not self.awaits_body():
            return
        try:
            async with asyncio.timeout(REST_OF_BODY_SECONDS):
                await body.rest()
        except Exception as exc:  # the client stopped sending, or went: keep what came
            log.debug("upload_rest_unread", id=self.ex.id, error=repr(exc))

    def end(self) -> None:
        """Fire `response` or `error` for an exchange that settled."""
        if self.stage is Stage.ENDED:
            return  # ended at its settling; `finish` or the driver's cleanup came after
        if self.stage is not Stage.SETTLED:
            raise StageError(f"exchange {self.ex.id} ({self.ex.path}) ends unsettled")
        self.advance(Stage.ENDED)
        if self.tee_buf is not None:
            self.parse_body()  # the rest of an early-answered upload came since
        self.ex.outcome, self.ex.ended = self.outcome, self.settled_at
        self.hooks.end(self.ex)

"""`replay serve`: an aiohttp server that answers as an Ollama from a recorder database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
import structlog
from aiohttp import web

from ollama_tap import ollama
from ollama_tap.hostcheck import host_check, local_addresses
from ollama_tap.ollama.errors import go_json
from ollama_tap.ollama.names import canonical_model
from ollama_tap.recorder.backend import DB_TIMEOUT, StoreError
from ollama_tap.recorder.reads import Reads
from ollama_tap.recorder.store import Filters, Store
from ollama_tap.replay.access import Readers, TooLarge, token_middleware
from ollama_tap.replay.catalog import VERSION, Catalog
from ollama_tap.replay.matching import Library, MatchMode, empty_fields, request_sketch
from ollama_tap.replay.render import Piece, Reply, Unreplayable, render

log = structlog.get_logger("ollama_tap.replay")
_JSON: Final = "application/json; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Pacing:
    speed: float = 1.0
    """Recorded offsets are divided by this: 2 plays twice as fast."""
    paced: bool = True
    """False: every piece as soon as it is ready (`--no-pacing`)."""


@dataclass(slots=True)
class Recordings:
    """What a database offers to serve."""

    library: Library
    catalog: Catalog


def load(store: Store, filters: Filters, mode: MatchMode, loop: bool) -> Recordings:
    """Index every matching record (blocking: a read of the whole database)."""
    library, catalog = Library(mode, loop), Catalog()
    for record in store.each(filters):
        if record["endpoint"] in ollama.POLLING_ENDPOINTS or record["endpoint"] == "/api/show":
            continue
        library.add(record)
        catalog.add(record)
    return Recordings(library, catalog)


class Replayer:
    """The request handler: match, render, pace; every miss is a 404 naming the difference."""

    def __init__(
        self, store: Store, recordings: Recordings, pacing: Pacing, *, explain: bool = False
    ) -> None:
        self.store, self.recordings, self.pacing = store, recordings, pacing
        self.explain = explain
        """A miss's reply names the closest record and how it differs (`--explain-misses`);
        otherwise only the log does."""
        self.misses = 0
        self.readers = Readers()
        self.reads = Reads(DB_TIMEOUT)
        """The database reads: bounded in time, in daemon threads (a hung PostgreSQL
        neither holds a request nor the process at exit)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        clock = asyncio.get_running_loop().time
        start = clock()
        try:
            raw = await self.readers.read(request)
        except TooLarge:
            return self.readers.too_large(request)
        endpoint = ollama.endpoint_of(request.raw_path)
        library = self.recordings.library
        want = request_sketch(request.method, request.path, raw, library.mode)
        rid = library.pick(want)
        if rid is None:
            why = library.miss(want)
            told = why if self.explain else library.miss(want, explain=False)
            return self._refuse(request, endpoint, told, why)
        if library.mode is not MatchMode.EXACT:
            self._normalised(request, raw, rid)
        try:
            reply = await self.reads.run(self._reply, rid)
        except Unreplayable as exc:
            return self._refuse(request, endpoint, str(exc))
        except StoreError as exc:  # a database that stopped answering: not a miss
            body = ollama.error_body(ollama.family_of(endpoint), 503, str(exc))
            return web.Response(status=503, body=body, headers={"Content-Type": _JSON})
        return await self._send(request, reply, lambda at: self._wait(start, at, clock))

    def _reply(self, rid: str) -> Reply:
        """The recorded reply (blocking: two reads of the database)."""
        record = self.store.get(rid)
        if record is None:
            raise Unreplayable(f"record {rid} is no longer in the database")
        reads = self.store.reply_reads(rid) if record.get("mode") == "full" else None
        if reads is None and record.get("mode") == "full":
            raw = (record.get("response") or {}).get("raw") or {}
            log.info(
                "replay_rebuilt",
                id=rid,
                reason=raw.get("reason") or "recorded without the reply's bytes",
            )
        return render(record, reads)

    @staticmethod
    def _normalised(request: web.Request, raw: bytes, rid: str) -> None:
        """Say which of the request's fields matching counted as absent (the `ollama`
        package's `"tools": []`), so a hit a person did not expect can be explained."""
        try:
            fields = empty_fields(orjson.loads(raw)) if raw else []
        except orjson.JSONDecodeError:
            return
        if fields:
            log.info("replay_normalised", path=request.path, id=rid, absent=fields)

    async def _wait(self, start: float, at: float, clock: Callable[[], float]) -> None:
        if self.pacing.paced:
            delay = start + at / self.pacing.speed - clock()
            if delay > 0:
                await asyncio.sleep(delay)

    def _refuse(
        self, request: web.Request, endpoint: str, message: str, why: str | None = None
    ) -> web.Response:
        """A 404 telling the client `message`; the log says `why` (by default the same)."""
        self.misses += 1
        log.warning("replay_miss", method=request.method, path=request.path, reason=why or message)
        body = ollama.error_body(ollama.family_of(endpoint), 404, message)
        return web.Response(status=404, body=body, headers={"Content-Type": _JSON})

    async def _send(self, request: web.Request, reply: Reply, wait: Waiter) -> web.StreamResponse:
        if not reply.streamed and len(reply.pieces) == 1:
            [piece] = reply.pieces
            await wait(piece.at)
            headers = {"Content-Type": _JSON, **reply.headers}
            return web.Response(status=reply.status, body=piece.data, headers=headers)
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        if not reply.streamed:  # a single reply relayed in several reads: framed as one
            response.headers.setdefault("Content-Type", _JSON)
            response.content_length = sum(len(piece.data) for piece in reply.pieces)
        try:
            for piece in reply.pieces:
                await wait(piece.at)
                await _write(request, response, piece)
            if not response.prepared:
                await response.prepare(request)
            await response.write_eof()
        except ConnectionResetError:
            # The client went away mid-stream (aiohttp's ClientConnectionResetError is one):
            # the rest of the recording is not needed, and it is no server error.
            log.info("replay_client_disconnected", method=request.method, path=request.path)
        return response


Waiter = Callable[[float], Any]


async def _write(request: web.Request, response: web.StreamResponse, piece: Piece) -> None:
    if not response.prepared:
        await response.prepare(request)  # headers go with the first line, as Ollama's do
    await response.write(piece.data)


def _json(value: Any, status: int = 200) -> web.Response:
    # gin's c.JSON, as Ollama answers these routes.
    return web.Response(status=status, body=go_json(value), headers={"Content-Type": _JSON})


def _poller_routes(catalog: Catalog, readers: Readers) -> list[web.RouteDef]:
    async def root(request: web.Request) -> web.Response:
        return web.Response(body=b"Ollama is running", content_type="text/plain")

    async def version(request: web.Request) -> web.Response:
        return _json({"version": VERSION})

    async def tags(request: web.Request) -> web.Response:
        return _json(catalog.tags())

    async def ps(request: web.Request) -> web.Response:
        return _json(catalog.ps())

    async def models(request: web.Request) -> web.Response:
        # Ollama's /v1 replies come from json.Encoder: a newline after the object.
        return web.Response(
            body=go_json(catalog.openai_models()) + b"\n", content_type="application/json"
        )

    async def show(request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await readers.read(request))
        except TooLarge:
            return readers.too_large(request)
        except orjson.JSONDecodeError:
            body = None
        name = (body.get("model") or body.get("name")) if isinstance(body, dict) else None
        found = catalog.show(canonical_model(name)) if isinstance(name, str) and name else None
        if found is None:
            return _json({"error": f"model '{name}' not found in the recordings"}, 404)
        return _json(found)

    return [
        web.get("/", root),
        web.get("/api/version", version),
        web.get("/api/tags", tags),
        web.get("/api/ps", ps),
        web.post("/api/show", show),
        web.get("/v1/models", models),
    ]


async def _drop_server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.popall("Server", None)  # Ollama sends none


REPLAYER: Final = web.AppKey("replayer", Replayer)


def replay_app(
    store: Store,
    recordings: Recordings,
    pacing: Pacing,
    *,
    token: str | None,
    loopback: bool = True,
    explain: bool = False,
) -> web.Application:
    """The Ollama-shaped app; `app[REPLAYER].misses` counts the refused requests.

    Every route but `/` and `/api/version` needs `token` as a Bearer credential (None: a
    loopback bind's `--no-token`; replay/access.py). Bound to `loopback`, it applies
    Ollama's Host rule (403 to a foreign Host), as Ollama and the proxy do there: a web
    page cannot read the recordings by DNS rebinding. `explain`: a miss's reply names the
    closest record and its first difference (`Replayer.explain`).
    """
    if token is None and not loopback:
        raise ValueError("a non-loopback replay server needs a token")
    middlewares = []
    if loopback:
        local_addresses()  # resolved now, not on the event loop at the first foreign Host
        middlewares.append(host_check)
    if token is not None:
        middlewares.append(token_middleware(token))
    app = web.Application(middlewares=middlewares)
    replayer = Replayer(store, recordings, pacing, explain=explain)
    app[REPLAYER] = replayer
    app.add_routes(_poller_routes(recordings.catalog, replayer.readers))
    app.router.add_route("*", "/{tail:.*}", replayer.handle)
    app.on_response_prepare.append(_drop_server_header)
    return app

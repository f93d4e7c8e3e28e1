"""The exchange driver: Tap, one per app, runs each exchange from its request to its end.

The transport (http1/relay.py) moves the bytes and reports what happened: the reply was
relayed to its end, the client left, the upstream cut the reply, no reply came. The driver
alone decides the outcome, whether the request goes upstream once more (relay/retry.py's
rule), and when the exchange's stages advance (tapped.py), so the hooks keep one contract
(ollama_tap/hooks.py).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.boxes.box import UPSTREAM_HEADER, Box
from ollama_tap.boxes.fleet import Boxes
from ollama_tap.boxes.router import Plan, Router, refusal
from ollama_tap.boxes.unions import UNION_ROUTES, UNION_TYPE, NoBoxAnswered
from ollama_tap.config import Settings
from ollama_tap.exchange import Outcome
from ollama_tap.facts import Route, RouteTier
from ollama_tap.hooks import Hooks
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.routes import MANAGEMENT_ENDPOINTS
from ollama_tap.relay.bodies import Upload, held_for_resend
from ollama_tap.relay.failures import INTERNAL_ERROR, ClientGone, UpstreamGone, no_reply
from ollama_tap.relay.headers import target_of
from ollama_tap.relay.incoming import Incoming
from ollama_tap.relay.retry import may_resend, retry_reason
from ollama_tap.relay.tapped import Guard, Stage, Tapped

log = structlog.get_logger("ollama_tap.relay")


class Fact(enum.Enum):
    """What the transport reports of how the reply went; the driver makes it an outcome."""

    REPLY_DONE = "reply_done"
    """The reply was relayed to its end (`Report.at`: its last write)."""
    CLIENT_LEFT = "client_left"
    """The client went away before the reply's end."""
    UPSTREAM_CUT = "upstream_cut"
    """The upstream cut its reply (`Report.error`)."""
    UNREACHABLE = "unreachable"
    """No reply came, after the one second send if it was made (`Report.error`)."""
    ANSWERED = "answered"
    """The proxy answered itself (several boxes: a union listing, a refusal)."""


class Report:
    """A `Fact`, with when the reply's last byte was written or what went wrong."""

    def __init__(self, fact: Fact, *, at: float = 0.0, error: BaseException | None = None) -> None:
        self.fact, self.at, self.error = fact, at, error


class Transport(Protocol):
    """What the driver asks of the transport for one exchange (`http1.relay.Http1Relay`)."""

    tapped: Tapped
    upload_failed: bool
    """A streamed upload failed on the client's side (a request never sent again)."""

    async def send(self, body: bytes | None, upload: Upload | None) -> None:
        """Send the request once (or adopt the send made on arrival) and wait for the
        reply's head; raises when none comes."""
        ...

    async def drop_attempt(self) -> None:
        """Let go of a send that failed: its reply, its upload (once it has stopped)."""
        ...

    async def relay_reply(self) -> Report:
        """Relay the reply whose head came to its end, and say how that went."""
        ...

    def client_gone(self) -> bool: ...

    def head_sent(self) -> bool:
        """Whether the client has a response head (an error can then only cut it)."""
        ...

    def abort_client(self) -> None: ...

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """Write a response the proxy made (if the client is there to take it)."""
        ...

    def aim(self, box: str) -> None:
        """Send to this box (by name) from now on."""
        ...

    def release(self) -> None:
        """The exchange settles: a head that came but never went out is told to the
        Exchange, and the upstream is closed unless its reply ended clean."""
        ...


class Tap:
    """The per-app half: settings, hooks, where requests go, what is in flight, shutdown."""

    def __init__(
        self,
        settings: Settings,
        hooks: Hooks,
        boxes: Boxes | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.settings = settings
        self.hooks = hooks
        self.guard = guard
        """The reload guard (`--reload-guard`), None when off."""
        if boxes is None:  # a driver on its own (tests): the boxes of the settings, unpolled
            boxes = Boxes(settings, CollectorRegistry(), ModelLabels(settings.model_label_cap))
        self.boxes = boxes
        self.router = boxes.router
        """None with one box: every request goes to it, as it always did."""
        self.targets = {b.name: target_of(settings, b.url) for b in boxes.boxes}
        self.target = self.targets[boxes.first.name]
        self.shutting_down = False
        """Set when shutdown begins: an exchange cancelled from then on ends as `shutdown`."""
        self._in_flight: set[asyncio.Task[Any]] = set()

    def exchange(self, incoming: Incoming) -> Tapped:
        """A new exchange for a request the transport parsed."""
        tapped = Tapped(self.settings, self.hooks, self.target, incoming, self.guard)
        if self.router is None:
            tapped.ex.box = self.boxes.first.name
        else:
            tapped.route(incoming.headers)  # the router decides, from the body (`_routed`)
        return tapped

    async def drive(self, relay: Transport) -> None:
        """Run one exchange to its end; whatever happens, it ends once with an outcome."""
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        tapped = relay.tapped
        try:
            await self._run(relay)
            await tapped.finish()
        finally:
            if self.router is not None:
                self.router.gone(tapped.ex)
            if tapped.stage < Stage.SETTLED:  # a bug in the driver itself: still one end
                log.error("exchange_unsettled", id=tapped.ex.id, stage=tapped.stage.name)
                tapped.settle(Outcome.PROXY_ERROR)
            # Cancelled or failed while the rest of its upload was read: ends without it.
            tapped.end()

    async def _run(self, relay: Transport) -> None:
        tapped = relay.tapped
        try:
            report = await self._exchange(relay)
        except asyncio.CancelledError:
            # The client left (the front cancels its task) or the proxy is stopping.
            gone = Outcome.SHUTDOWN if self.shutting_down else Outcome.CLIENT_DISCONNECTED
            self._settle(relay, *tapped.left(gone))
            raise
        except ClientGone as exc:
            # The request broke off on the client's side (it left, or its body's framing
            # did not parse; the transport logged which): the client's doing, not a bug.
            ex = tapped.ex
            log.info("client_request_broken", id=ex.id, path=ex.path, error=str(exc))
            relay.abort_client()
            self._settle(relay, Outcome.CLIENT_DISCONNECTED)
            raise
        except Exception:
            ex = tapped.ex
            log.exception("relay_failed", id=ex.id, path=ex.path)
            if relay.head_sent():
                relay.abort_client()
                self._settle(relay, Outcome.PROXY_ERROR)
                raise
            relay.answer(500, tapped.proxy_error(500, INTERNAL_ERROR))
            self._settle(relay, Outcome.PROXY_ERROR)
            return
        await self._conclude(relay, report)

    async def _exchange(self, relay: Transport) -> Report:
        """Send the request (once more if the rule allows), relay the reply."""
        data = await relay.tapped.upload()
        if self.router is not None:
            return await self._routed(relay, self.router, data)
        try:
            await self._send(relay, data)
        except (ConnectionError, TimeoutError, OSError) as exc:
            return Report(Fact.UNREACHABLE, error=exc)
        return await relay.relay_reply()

    async def _routed(
        self, relay: Transport, router: Router, data: bytes | AsyncIterator[bytes] | None
    ) -> Report:
        """With several boxes: answer from all of them, refuse, or send to the box the
        router ranks first; a connection that fails before any reply byte (and that the
        retry rule would send again) goes to the next box (docs/boxes.md)."""
        tapped = relay.tapped
        ex = tapped.ex
        if ex.method == "GET" and ex.endpoint in UNION_ROUTES:
            return await self._union(relay)
        named = ex.request_headers.get(UPSTREAM_HEADER) or next(
            (v for k, v in ex.request_headers.items() if k.lower() == UPSTREAM_HEADER.lower()), None
        )
        if named is not None or ex.endpoint in MANAGEMENT_ENDPOINTS:
            box = router.by_name.get((named or "").strip())
            if box is None:
                return self._refuse(relay, refusal(named, router))
            plan = Plan(
                box, Route(box.name, RouteTier.NAMED, f"{UPSTREAM_HEADER} named {box.name}")
            )
        else:
            if isinstance(data, bytes):
                tapped.parse_body()  # the model decides the box; the body is at hand
            streams = data is not None and not isinstance(data, bytes)
            first = router.plan(ex, unread=streams)
            assert first is not None  # nothing tried yet: every box is a candidate
            plan = first
            if isinstance(data, bytes):
                data = tapped.guard_for(data, plan.box.loads)
        tried: list[Box] = []
        while True:
            box, ex.route = plan.box, plan.route
            relay.aim(box.name)
            router.going(ex, plan)
            self.boxes.routed[box.name, plan.route.tier.value].inc()
            try:
                await self._send(relay, data)
            except (ConnectionError, TimeoutError, OSError) as exc:
                tried.append(box)
                # The next box, ranked from the state now; a named box has none.
                go_on = named is None and self._next_box(relay, data, exc)
                after = router.plan(ex, tried) if go_on else None
                if after is None:
                    return Report(Fact.UNREACHABLE, error=exc)
                await relay.drop_attempt()
                router.gone(ex)
                ex.box = ""
                failed = f"{box.name} failed before replying ({exc})"
                why = f"{plan.route.reason}; {failed}, so {after.box.name}"
                after.route = Route(after.box.name, RouteTier.FAILOVER, why)
                log.info(
                    "next_box",
                    id=ex.id,
                    path=ex.path,
                    box=box.name,
                    to=after.box.name,
                    error=str(exc),
                )
                plan = after
                continue
            return await relay.relay_reply()

    def _next_box(
        self, relay: Transport, data: bytes | AsyncIterator[bytes] | None, exc: BaseException
    ) -> bool:
        """Whether a request whose send failed goes to the next box: no reply byte came, the
        client is still there, the route may be sent twice, and the body is at hand."""
        ex = relay.tapped.ex
        if isinstance(exc, UpstreamGone) and not exc.unanswered:
            return False
        if relay.client_gone() or not may_resend(ex.method, ex.endpoint):
            return False
        return data is None or isinstance(data, bytes)

    def _refuse(self, relay: Transport, message: str) -> Report:
        relay.answer(400, relay.tapped.proxy_error(400, message))
        return Report(Fact.ANSWERED, at=0.0)

    async def _union(self, relay: Transport) -> Report:
        """A model-less listing answered from every box (boxes/unions.py)."""
        tapped = relay.tapped
        try:
            body = await self.boxes.unions.answer(tapped.ex.endpoint, tapped.raw_path_qs)
        except NoBoxAnswered as exc:
            return Report(Fact.UNREACHABLE, error=ConnectionError(str(exc)))
        relay.answer(200, body, UNION_TYPE)
        tapped.answered_by_proxy(200, UNION_TYPE, body)
        return Report(Fact.ANSWERED, at=tapped.last_write or 0.0)

    async def _send(self, relay: Transport, data: bytes | AsyncIterator[bytes] | None) -> None:
        """Send the request; once more, on a fresh connection, when a reused one died
        before any byte of the reply and relay/retry.py's rule allows it: a client still
        there, an upload that failed on the upstream's side only, and every body byte sent
        so far at hand."""
        tapped = relay.tapped
        body = data if isinstance(data, bytes) else None
        upload = Upload(data) if data is not None and not isinstance(data, bytes) else None
        while True:
            try:
                await relay.send(body, upload)
                return
            except UpstreamGone as gone:
                ex = tapped.ex
                reason = retry_reason(
                    ex, reused=gone.reused, replied=not gone.unanswered, reset=gone.reset
                )
                if reason is None or relay.client_gone() or relay.upload_failed:
                    raise
                await relay.drop_attempt()
                resend = await held_for_resend(upload, tapped.sent_so_far)
                if resend is None:
                    raise
                ex.retried = reason
                log.debug("resent", id=ex.id, path=ex.path, reason=str(reason))
                if upload is not None:
                    upload = Upload(upload.body, resend)

    async def _conclude(self, relay: Transport, report: Report) -> None:
        """The outcome of what the transport reported."""
        tapped, fact = relay.tapped, report.fact
        if fact is Fact.REPLY_DONE:
            # The duration ends with the last write, not after the reader's parse of a
            # single reply (up to the tee limit: a large embedding).
            tapped.close_reader(report.at)
            self._settle(relay, tapped.reply_outcome(), report.at)
        elif fact is Fact.ANSWERED:
            ok = relay.tapped.ex.status == 200
            self._settle(relay, Outcome.OK if ok else Outcome.UPSTREAM_ERROR, report.at or None)
        elif fact is Fact.CLIENT_LEFT:
            self._settle(relay, *tapped.left(Outcome.CLIENT_DISCONNECTED))
        elif fact is Fact.UPSTREAM_CUT:
            relay.abort_client()  # cut as the upstream cut it: the client sees what it would
            assert report.error is not None
            self._settle(relay, tapped.cut(report.error))
        elif relay.client_gone():
            self._settle(relay, Outcome.CLIENT_DISCONNECTED)
        else:
            error = report.error
            assert error is not None
            status, message = no_reply(
                self.target.url, error, broken_off=isinstance(error, UpstreamGone)
            )
            # Before the reply, which most clients take as the end of their upload: the
            # record keeps what the request said (the upload stopped first: one reader).
            relay.release()
            await tapped.read_rest()
            relay.answer(status, tapped.proxy_error(status, message))
            self._settle(relay, Outcome.UPSTREAM_UNREACHABLE)

    @staticmethod
    def _settle(relay: Transport, outcome: Outcome, at: float | None = None) -> None:
        relay.release()
        relay.tapped.settle(outcome, at)

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

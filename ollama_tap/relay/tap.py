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

from ollama_tap.config import Settings
from ollama_tap.exchange import Outcome
from ollama_tap.hooks import Hooks
from ollama_tap.relay.bodies import Upload, held_for_resend
from ollama_tap.relay.failures import INTERNAL_ERROR, ClientGone, UpstreamGone, no_reply
from ollama_tap.relay.headers import target_of
from ollama_tap.relay.incoming import Incoming
from ollama_tap.relay.retry import retry_reason
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

    def answer(self, status: int, body: bytes) -> None:
        """Write a response the proxy made (if the client is there to take it)."""
        ...

    def release(self) -> None:
        """The exchange settles: a head that came but never went out is told to the
        Exchange, and the upstream is closed unless its reply ended clean."""
        ...


class Tap:
    """The per-app half: settings, hooks, where requests go, what is in flight, shutdown."""

    def __init__(self, settings: Settings, hooks: Hooks, guard: Guard | None = None) -> None:
        self.settings = settings
        self.hooks = hooks
        self.guard = guard
        """The reload guard (`--reload-guard`), None when off."""
        self.target = target_of(settings)
        self.shutting_down = False
        """Set when shutdown begins: an exchange cancelled from then on ends as `shutdown`."""
        self._in_flight: set[asyncio.Task[Any]] = set()

    def exchange(self, incoming: Incoming) -> Tapped:
        """A new exchange for a request the transport parsed."""
        return Tapped(self.settings, self.hooks, self.target, incoming, self.guard)

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
        try:
            await self._send(relay, data)
        except (ConnectionError, TimeoutError, OSError) as exc:
            return Report(Fact.UNREACHABLE, error=exc)
        return await relay.relay_reply()

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

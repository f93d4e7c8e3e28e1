"""The exchange driver without a transport: stages and hook order, outcomes from what the
transport reports, the one retry and error shapes, each step fed by hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import orjson
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client import CollectorRegistry
from yarl import URL

from ollama_tap.config import Settings
from ollama_tap.exchange import Exchange, Outcome, OutputChunk
from ollama_tap.hooks import Hooks
from ollama_tap.relay.bodies import Upload
from ollama_tap.relay.failures import StageError, UpstreamGone
from ollama_tap.relay.incoming import Incoming
from ollama_tap.relay.tap import Fact, Report, Tap
from ollama_tap.relay.tapped import Stage, Tapped

NDJSON = CIMultiDictProxy(CIMultiDict({"Content-Type": "application/x-ndjson"}))
JSON = CIMultiDictProxy(CIMultiDict({"Content-Type": "application/json; charset=utf-8"}))
LINE = b'{"model":"m","created_at":"2026-01-01T00:00:00Z","response":"%s","done":false}\n'
FINAL = (
    b'{"model":"m","created_at":"2026-01-01T00:00:01Z","response":"","done":true,'
    b'"done_reason":"stop","total_duration":9,"prompt_eval_count":3,"eval_count":2}\n'
)


class Calls:
    """An observer that writes down each hook it gets, with the outcome at the end."""

    name = "calls"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def request(self, ex: Exchange) -> None:
        self.seen.append(("request", ex.request.model if ex.request else None))

    def response_headers(self, ex: Exchange) -> None:
        self.seen.append(("response_headers", ex.status))

    def chunk(self, ex: Exchange, piece: OutputChunk) -> None:
        self.seen.append(("chunk", piece.text))

    def response(self, ex: Exchange) -> None:
        self.seen.append(("response", ex.outcome))

    def error(self, ex: Exchange) -> None:
        self.seen.append(("error", ex.outcome))


class Body:
    """A body source that has all of `pieces`, or gets them one by one (`streamed`)."""

    def __init__(self, pieces: list[bytes], streamed: bool = False) -> None:
        self.pieces = pieces
        self.streamed = streamed

    def is_eof(self) -> bool:
        return not self.streamed

    async def read(self) -> bytes:
        return b"".join(self.pieces)

    def iter_any(self) -> AsyncIterator[bytes]:
        return self._each()

    async def _each(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await asyncio.sleep(0)
            yield piece


class Made(NamedTuple):
    tapped: Tapped
    calls: Calls


def tapped(path: str = "/api/generate", body: Body | None = None, **settings: Any) -> Made:
    """An exchange as a transport would make it, and what its hooks saw."""
    calls = Calls()
    tap = Tap(
        Settings(upstream="http://127.0.0.1:11434", **settings), Hooks([calls], CollectorRegistry())
    )
    incoming = Incoming(
        "POST",
        URL(path),
        CIMultiDictProxy(CIMultiDict({"Content-Type": "application/json"})),
        "127.0.0.1",
        asyncio.get_event_loop().time(),
        body or Body([b'{"model":"m","prompt":"hi"}']),
        True,
    )
    return Made(tap.exchange(incoming), calls)


async def test_a_streamed_reply_fires_every_hook_once_in_order() -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    assert await t.upload() is not None
    t.fire_request()
    t.reply_head(200, NDJSON, 1.0)
    t.read_piece(LINE % b"a" + LINE % b"b", 2.0)
    t.read_piece(FINAL, 3.0)
    t.close_reader(3.0)
    t.settle(t.reply_outcome(), 3.0)
    assert t.stage is Stage.ENDED
    with pytest.raises(StageError, match="SETTLED from ENDED"):  # a bug, said loudly
        t.settle(Outcome.PROXY_ERROR)
    assert calls.seen == [
        ("request", "m"),
        ("response_headers", 200),
        ("chunk", "a"),
        ("chunk", "b"),
        ("response", Outcome.OK),
    ]
    assert t.ex.output_events == 2 and t.ex.ended == 3.0 and t.ex.response_bytes > 0


async def test_the_body_at_hand_is_teed_and_parsed_once() -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    incoming_body = await t.upload()
    assert incoming_body == b'{"model":"m","prompt":"hi"}'
    t.fire_request()
    t.fire_request()
    assert calls.seen == [("request", "m")]
    assert t.ex.request_body == incoming_body and t.ex.request_bytes == len(incoming_body)


async def test_a_streamed_body_fires_the_request_hook_at_its_end() -> None:
    made = tapped(body=Body([b'{"model":', b'"m2"}'], streamed=True))
    t, calls = made.tapped, made.calls
    stream = await t.upload()
    assert not isinstance(stream, bytes) and stream is not None
    pieces = []
    async for piece in stream:
        assert calls.seen == []
        pieces.append(piece)
    assert pieces == [b'{"model":', b'"m2"}'] and calls.seen == [("request", "m2")]


async def test_a_body_past_the_tee_limit_is_relayed_but_not_parsed() -> None:
    made = tapped(body=Body([b'{"model":"m","prompt":"' + b"x" * 100 + b'"}']), body_tee_limit=50)
    t, calls = made.tapped, made.calls
    await t.upload()
    t.fire_request()
    assert t.ex.request is not None and t.ex.request.truncated
    assert t.ex.request_body is None and t.ex.request_bytes > 50
    assert calls.seen == [("request", None)]


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/api/chat", {"error": "ollama-tap: no"}),
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
    ],
)
async def test_a_proxy_made_error_takes_the_route_familys_shape(path: str, shape: Any) -> None:
    made = tapped(path)
    t, calls = made.tapped, made.calls
    body = orjson.loads(t.proxy_error(502, "ollama-tap: no"))
    t.settle(Outcome.UPSTREAM_UNREACHABLE)
    if shape == "openai":
        assert body["error"]["message"] == "ollama-tap: no"
    elif shape == "anthropic":
        assert body["type"] == "error" and body["error"]["message"] == "ollama-tap: no"
    else:
        assert body == shape
    assert (t.ex.status, t.ex.error_message) == (502, "ollama-tap: no")
    assert calls.seen == [
        ("request", None),
        ("error", Outcome.UPSTREAM_UNREACHABLE),
    ]  # no body teed


@pytest.mark.parametrize(
    ("pieces", "outcome"),
    [
        ([LINE % b"a"], Outcome.INCOMPLETE),  # cut before the final object
        ([LINE % b"a", FINAL], Outcome.OK),  # the client has every line
    ],
)
async def test_a_cut_stream_ends_as_far_as_it_got(pieces: list[bytes], outcome: Outcome) -> None:
    t = tapped().tapped
    t.reply_head(200, NDJSON)
    for piece in pieces:
        t.read_piece(piece, 1.0)
    assert t.cut(ConnectionResetError("gone")) is outcome
    assert t.ex.error_message is not None and "upstream cut the reply" in t.ex.error_message


async def test_a_cut_single_reply_is_incomplete() -> None:
    t = tapped().tapped
    t.reply_head(200, JSON)
    t.read_piece(b'{"model":"m","done":tr', 1.0)
    assert t.cut(ConnectionResetError("gone")) is Outcome.INCOMPLETE


class Driven:
    """A transport whose reply does what it is told (`reply`, given the transport: a
    Report, or None for a reply relayed to its end at 2.0), for the driver's rules."""

    def __init__(self, tapped: Tapped, reply: Any, started: bool = False) -> None:
        self.tapped = tapped
        self._reply = reply
        self.started = started
        self.upload_failed = False
        self.aborted = False
        self.upload: Upload | None = None
        self.sends: list[bytes | None] = []
        self.fail_sends: list[BaseException] = []
        self.errors: list[tuple[int, bytes]] = []

    async def send(self, body: bytes | None, upload: Upload | None) -> None:
        self.sends.append(body)
        self.upload = upload
        if self.fail_sends:
            raise self.fail_sends.pop(0)

    async def drop_attempt(self) -> None:
        pass

    async def relay_reply(self) -> Report:
        report = await self._reply(self)
        return report if report is not None else Report(Fact.REPLY_DONE, at=2.0)

    def client_gone(self) -> bool:
        return False

    def head_sent(self) -> bool:
        return self.started

    def abort_client(self) -> None:
        self.aborted = True

    def answer(self, status: int, body: bytes) -> None:
        self.errors.append((status, body))

    def release(self) -> None:
        pass


@pytest.mark.parametrize(
    ("shutting_down", "outcome"), [(False, Outcome.CLIENT_DISCONNECTED), (True, Outcome.SHUTDOWN)]
)
async def test_a_cancelled_exchange_ends_as_a_disconnect_or_shutdown(
    shutting_down: bool, outcome: Outcome
) -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)
    tap.shutting_down = shutting_down

    async def cancelled(_: Driven) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await tap.drive(Driven(t, cancelled))
    assert calls.seen[-1] == ("error", outcome)


async def test_a_bug_before_the_reply_is_a_500_and_after_it_a_cut() -> None:
    async def bug(_: Driven) -> None:
        raise RuntimeError("a bug")

    made = tapped()

    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)
    before = Driven(t, bug)
    await tap.drive(before)
    [(status, body)] = before.errors
    assert status == 500 and b"internal error" in body
    assert calls.seen[-1] == ("error", Outcome.PROXY_ERROR)

    made2 = tapped()

    t2, calls2 = made2.tapped, made2.calls
    after = Driven(t2, bug, started=True)
    with pytest.raises(RuntimeError):
        await tap.drive(after)
    assert after.aborted and not after.errors
    assert calls2.seen[-1] == ("error", Outcome.PROXY_ERROR)


@pytest.mark.parametrize(
    ("report", "outcome", "aborted", "status"),
    [
        (Report(Fact.CLIENT_LEFT), Outcome.CLIENT_DISCONNECTED, False, None),
        (Report(Fact.UPSTREAM_CUT, error=ConnectionResetError()), Outcome.INCOMPLETE, True, None),
        (Report(Fact.UNREACHABLE, error=TimeoutError()), Outcome.UPSTREAM_UNREACHABLE, False, 504),
        (
            Report(Fact.UNREACHABLE, error=UpstreamGone("garbage")),
            Outcome.UPSTREAM_UNREACHABLE,
            False,
            502,
        ),
    ],
)
async def test_the_driver_decides_the_outcome_of_what_the_transport_reports(
    report: Report, outcome: Outcome, aborted: bool, status: int | None
) -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)

    async def reported(_: Driven) -> Report:
        t.reply_head(200, JSON)
        return report

    async def unreachable(_: Driven) -> None:
        raise AssertionError("no reply to relay")

    driven = Driven(t, reported if report.fact is not Fact.UNREACHABLE else unreachable)
    if report.fact is Fact.UNREACHABLE:
        assert report.error is not None
        driven.fail_sends = [report.error]
    await tap.drive(driven)
    assert calls.seen[-1][1] is outcome and driven.aborted is aborted
    assert [s for s, _ in driven.errors] == ([status] if status else [])


@pytest.mark.parametrize(
    ("gone", "resent"),
    [
        (UpstreamGone("idle", unanswered=True, reused=True), True),
        (UpstreamGone("idle", unanswered=True, reused=True, reset=True), True),
        (UpstreamGone("fresh", unanswered=True), False),  # a fresh connection's answer
        (UpstreamGone("mid-reply", reused=True), False),  # a byte of the reply came
    ],
)
async def test_the_driver_sends_again_once_when_the_rule_allows(
    gone: UpstreamGone, resent: bool
) -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)

    async def done(_: Driven) -> None:
        t.reply_head(200, JSON)
        t.read_piece(b"{}", 2.0)

    driven = Driven(t, done)
    driven.fail_sends = [gone]
    await tap.drive(driven)
    body = b'{"model":"m","prompt":"hi"}'
    if resent:
        assert driven.sends == [body, body] and t.ex.retried is not None
        assert calls.seen[-1] == ("response", Outcome.OK)
    else:
        assert driven.sends == [body] and t.ex.retried is None
        assert calls.seen[-1] == ("error", Outcome.UPSTREAM_UNREACHABLE)


async def test_the_driver_sends_again_at_most_once() -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)
    driven = Driven(t, lambda _: asyncio.sleep(0))
    driven.fail_sends = [UpstreamGone("idle", unanswered=True, reused=True)] * 2
    await tap.drive(driven)
    assert len(driven.sends) == 2 and calls.seen[-1] == ("error", Outcome.UPSTREAM_UNREACHABLE)


async def test_shutdown_cancels_what_is_still_in_flight_after_the_grace() -> None:
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)

    async def forever(_: Driven) -> None:
        await asyncio.sleep(60)

    task = asyncio.ensure_future(tap.drive(Driven(t, forever)))
    await asyncio.sleep(0)
    tap.shut_down(0.05)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    assert calls.seen[-1] == ("error", Outcome.SHUTDOWN)


@pytest.mark.parametrize("shutting_down", [False, True])
async def test_a_stream_cancelled_after_its_final_object_ends_as_it_says(
    shutting_down: bool,
) -> None:
    """Clients that close at `done:true`, before the upstream's end of body, had it all."""
    made = tapped()
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)
    tap.shutting_down = shutting_down

    async def left_at_done(_: Driven) -> None:
        t.reply_head(200, NDJSON)
        t.read_piece(LINE % b"a", 2.0)
        t.read_piece(FINAL, 3.0)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await tap.drive(Driven(t, left_at_done))
    assert calls.seen[-1] == ("response", Outcome.OK)
    assert t.ex.ended == 3.0  # its last write, not when the client left


async def test_a_body_that_ends_after_the_reply_is_parsed_before_the_end() -> None:
    gate = asyncio.Event()

    class Late(Body):
        async def _each(self) -> AsyncIterator[bytes]:
            yield self.pieces[0]
            await gate.wait()  # the rest comes after the reply
            yield self.pieces[1]

    made = tapped(body=Late([b'{"model":', b'"late"}'], streamed=True))
    t, calls = made.tapped, made.calls
    tap = Tap(Settings(upstream="http://127.0.0.1:11434"), t.hooks)

    async def answered_early(driven: Driven) -> None:
        stream = driven.upload
        assert stream is not None
        assert await stream.__anext__() == b'{"model":'  # the upload's first piece
        t.reply_head(400, JSON)
        t.read_piece(b'{"error":"no"}', 2.0)
        asyncio.get_running_loop().call_later(0.05, gate.set)

    await tap.drive(Driven(t, answered_early))
    assert calls.seen == [
        ("request", None),  # fired with the reply's head: the body was not whole
        ("response_headers", 400),
        ("response", Outcome.UPSTREAM_ERROR),
    ]
    assert (t.ex.model, t.ex.request_body, t.ex.ended) == ("late", b'{"model":"late"}', 2.0)


async def test_a_step_its_stage_does_not_allow_is_a_bug_said_loudly() -> None:
    """Stages only go forwards: a head after the end, an end before the settling, a second
    settling are the proxy's bugs, raised with both stages named, never passed over."""
    t = tapped().tapped
    assert t.stage is Stage.ARRIVED
    with pytest.raises(StageError, match="ends unsettled"):
        t.end()
    t.fire_request()
    t.fire_request()  # whichever comes first fires it; the others find it done
    assert t.stage is Stage.REQUESTED
    t.reply_head(200, JSON)
    with pytest.raises(StageError, match="HEADERS from HEADERS"):
        t.reply_head(200, JSON)
    t.settle(Outcome.OK, 1.0)
    assert t.stage is Stage.ENDED
    with pytest.raises(StageError, match="HEADERS from ENDED"):
        t.reply_head(200, JSON)

"""`replay send`: re-send recorded requests to another upstream and measure each reply.

Each reply is read by the proxy's own reader and outcome rules (as `ollama-tap bench`
does), so the figures mean what the metrics mean; client times are from just before the
request is sent. The recorded figures are the record's own columns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp
import orjson
from yarl import URL

from ollama_tap import ollama
from ollama_tap.benchmark.request import REPLY_LIMIT, settled, verdict
from ollama_tap.exchange import Exchange, Outcome, RequestFields, Usage
from ollama_tap.measures import timings

Pace = Literal["original", "none"]
_NOT_SENT: Final = frozenset({"content-length", "transfer-encoding", "content-encoding",
                              "accept-encoding"})  # fmt: skip
_NS: Final = 1e9
POLLING: Final = "a polling route"


def skip_reason(record: dict[str, Any], include_management: bool) -> str | None:
    """Why a record is not re-sent, None when it is."""
    endpoint = record["endpoint"]
    if endpoint in ollama.POLLING_ENDPOINTS:
        return POLLING
    if endpoint in ollama.MANAGEMENT_ENDPOINTS and not include_management:
        return "a management route (--include-management sends it)"
    if record.get("mode") != "full":
        return f"recorded in {record.get('mode')} mode: the request body was not kept"
    body = (record.get("request") or {}).get("body")
    if body is not None and ("json" not in body or body.get("truncated")):
        return "the request body was not kept whole"
    if record.get("media"):
        return "its images were kept only as hashes"
    return None


def figures(
    usage: Usage | None, ttft: float | None, ttfc: float | None, duration: float | None
) -> dict[str, float | None]:
    """The compared figures; rates by Usage's own definitions."""
    return {
        "ttft": ttft,
        "ttfc": ttfc,
        "duration": duration,
        "decode_rate": usage.decode_rate if usage else None,
        "prefill_rate": usage.prefill_rate if usage else None,
        "load": usage.load_duration / _NS if usage and usage.has_timings else None,
        "output_tokens": float(usage.eval_count) if usage and usage.eval_count else None,
    }


def recorded(record: dict[str, Any]) -> dict[str, Any]:
    """The record's side: its figures, status, outcome and done_reason."""
    usage = None
    if record.get("eval_tokens") is not None or record.get("load") is not None:
        usage = Usage(
            load_duration=round((record.get("load") or 0) * _NS),
            prompt_eval_count=record.get("prompt_tokens"),
            prompt_eval_duration=round((record.get("prefill") or 0) * _NS),
            eval_count=record.get("eval_tokens") or 0,
            eval_duration=round((record.get("decode") or 0) * _NS),
            prompt_eval_cached_count=record.get("cached_tokens"),
            has_timings=record.get("load") is not None,
        )
    return {
        **figures(usage, record.get("ttft"), record.get("ttfc"), record.get("duration")),
        "status": record.get("status"),
        "outcome": record.get("outcome"),
        "done_reason": record.get("done_reason"),
    }


async def resend(session: aiohttp.ClientSession, to: URL, record: dict[str, Any]) -> dict[str, Any]:
    """Send the record's request to `to` and measure the reply; never raises for a failure."""
    body = (record.get("request") or {}).get("body")
    data = orjson.dumps(body["json"]) if body is not None else None
    headers = {
        k: v for k, v in ((record.get("request") or {}).get("headers") or {}).items()
        if k.lower() not in _NOT_SENT
    }  # fmt: skip
    parsed = body["json"] if body is not None and isinstance(body["json"], dict) else {}
    stream = parsed.get("stream")
    ex = Exchange(
        method=record["method"],
        path=record["path"],
        query="",
        endpoint=record["endpoint"],
        client="",
        request_headers=headers,
        request=RequestFields(
            model=parsed.get("model"),
            stream=stream if isinstance(stream, bool) else None,
            parsed=True,
        ),
        started=time.perf_counter(),
    )
    outcome = await settled(ex, _exchange(session, to, ex, data))
    t = timings(ex)
    return {
        **figures(ex.usage, t["ttft"], t["ttfc"], t["duration"]),
        "status": ex.status,
        "outcome": outcome.value,
        "done_reason": ex.done_reason,
        "error": ex.error_message if outcome is not Outcome.OK else None,
    }


async def _exchange(
    session: aiohttp.ClientSession, to: URL, ex: Exchange, data: bytes | None
) -> Outcome:
    url = to.with_path(to.path.rstrip("/") + ex.path)
    async with session.request(ex.method, url, data=data, headers=ex.request_headers) as resp:
        ex.status = resp.status
        ex.content_type = resp.headers.get("Content-Type", "")
        ex.streamed = ollama.is_streamed(ex.content_type)
        reader = ollama.reader_for(ex, REPLY_LIMIT)
        text = bytearray()
        async for chunk in resp.content.iter_any():
            if reader is not None and (pieces := reader.feed(chunk, time.perf_counter())):
                ex.note_outputs(pieces)
            if len(text) < REPLY_LIMIT and (reader is None or resp.status >= 400):
                text += chunk
        if reader is not None and (pieces := reader.close(time.perf_counter())):
            ex.note_outputs(pieces)
        ex.ended = time.perf_counter()
    return verdict(ex, reader, bytes(text[:4096]).decode(errors="replace").strip())


@dataclass(frozen=True, slots=True)
class Plan:
    to: URL
    concurrency: int = 1
    pace: Pace = "none"


Tick = Callable[[], None]


async def send_all(
    plan: Plan, records: Sequence[dict[str, Any]], tick: Tick
) -> list[dict[str, Any]]:
    """Each record's request re-sent: {"recorded": ..., "now": ...} in the records' order."""
    gate = asyncio.Semaphore(plan.concurrency)
    first = records[0]["started"] if records else 0.0
    start = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(record: dict[str, Any]) -> dict[str, Any]:
            if plan.pace == "original":
                await asyncio.sleep(
                    max(0.0, start + record["started"] - first - time.perf_counter())
                )
            async with gate:
                now = await resend(session, plan.to, record)
            tick()
            return now

        nows = await asyncio.gather(*(one(r) for r in records))
    return [{"recorded": recorded(r), "now": now} for r, now in zip(records, nows, strict=True)]

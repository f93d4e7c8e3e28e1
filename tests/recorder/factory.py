"""Exchanges built at fixed timestamps, and a driver that fires the recorder's hooks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from ollama_tap.config import Settings
from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind, RequestFields, Usage
from ollama_tap.recorder import Recorder
from tests.support.exchanges import new_exchange

WALL0 = 1_750_000_000.0
MONO0 = 5_000.0
SECRET_HEADER = "Bearer sk-HEADER-SECRET-1234"
SECRET_PROMPT = "PROMPT-SECRET-tell-nobody"
ERROR_HOOK = {
    Outcome.CLIENT_DISCONNECTED,
    Outcome.UPSTREAM_UNREACHABLE,
    Outcome.PROXY_ERROR,
    Outcome.SHUTDOWN,
}


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    # A long retention: records carry fixed timestamps that real time has long passed.
    values: dict[str, Any] = {
        "db": tmp_path / "data" / "records.db",
        "record": "full",
        "retention_days": 100_000,
    }
    values.update(overrides)
    return Settings.model_validate(values)


def chat_body(prompt: str = SECRET_PROMPT, **extra: Any) -> dict[str, Any]:
    body = {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": prompt}],
        "options": {"num_ctx": 8192, "temperature": 0.5, "stop": ["</s>"]},
    }
    body.update(extra)
    return body


def exchange(
    *,
    endpoint: str = "/api/chat",
    method: str = "POST",
    body: dict[str, Any] | bytes | None = None,
    outcome: Outcome = Outcome.OK,
    status: int | None = 200,
    streamed: bool = True,
    started_wall: float = WALL0,
    final: dict[str, Any] | None = None,
    usage: Usage | None = None,
    ex_id: str | None = None,
) -> Exchange:
    """An exchange as the relay leaves it at the request hook."""
    raw = body if isinstance(body, bytes | None) else orjson.dumps(body)
    parsed = orjson.loads(raw) if raw else {}
    ex = new_exchange(
        endpoint,
        method=method,
        query="client=app&key=QUERY-SECRET",
        client="10.1.2.3",
        request_headers={
            "Authorization": SECRET_HEADER,
            "Cookie": "session=COOKIE-SECRET",
            "X-Api-Key": "XKEY-SECRET",
            "User-Agent": "ollama-python/0.6.3",
            "Content-Type": "application/json",
        },
        started=MONO0,
        started_wall=started_wall,
        request=RequestFields(
            model=parsed.get("model"),
            options=parsed.get("options"),
            parsed=bool(parsed),
        ),
    )
    ex.request_body = raw
    ex.request_bytes = len(raw or b"")
    if ex_id is not None:
        ex.id = ex_id
    ex.status = status
    ex.streamed = streamed
    ex.content_type = "application/x-ndjson" if streamed else "application/json"
    ex.response_headers = {"Content-Type": ex.content_type, "Set-Cookie": "a=SETCOOKIE-SECRET"}
    ex.final = final
    ex.usage = usage
    ex.outcome = outcome
    return ex


def native_usage() -> Usage:
    return Usage(
        total_duration=2_000_000_000,
        load_duration=300_000_000,
        prompt_eval_count=26,
        prompt_eval_duration=200_000_000,
        eval_count=10,
        eval_duration=1_000_000_000,
        prompt_eval_cached_count=4,
        has_timings=True,
    )


def pieces(n: int, *, start: float = 0.5, gap: float = 0.02) -> list[OutputChunk]:
    """n output pieces: one thinking piece, then content, at fixed offsets."""
    out = []
    for i in range(n):
        kind = OutputKind.THINKING if i == 0 else OutputKind.CONTENT
        out.append(OutputChunk(MONO0 + start + i * gap, kind, f"tok{i} ", 60))
    return out


def drive(rec: Recorder, ex: Exchange, chunks: Sequence[OutputChunk] = ()) -> None:
    """Fire request, chunk* and the end hook the outcome calls for, as the relay does."""
    rec.request(ex)
    for piece in chunks:
        if ex.first_output is None:
            ex.first_created_at = "2025-06-15T14:13:20.400000Z"
        ex.note_outputs((piece,))
        ex.response_bytes += piece.nbytes
        rec.chunks(ex, (piece,))
    ex.ended = (ex.last_output or MONO0) + 0.01
    if ex.outcome in ERROR_HOOK:
        rec.error(ex)
    else:
        rec.response(ex)


async def stored(rec: Recorder, record_id: str) -> dict[str, Any]:
    """The record as the API would read it (in a thread: the loop never touches the file)."""
    record = await asyncio.to_thread(rec.store.get, record_id)
    assert record is not None, f"record {record_id} was not stored"
    return record

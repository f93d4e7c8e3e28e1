"""Records written through the recorder's own API, under the Ollama versions a test names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Usage
from ollama_tap.recorder import Recorder
from tests.recorder.factory import WALL0, chat_body, drive, exchange, make_settings, pieces
from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]


@dataclass(frozen=True)
class Batch:
    """`n` chat exchanges of `model` served by Ollama `version` at about `rate` tokens/s."""

    version: str | None
    model: str
    rate: float
    n: int = 30
    prompt_tokens: int = 500
    load: float = 0.02
    """Seconds of load_duration: over 1 s is a cold start."""


def _usage(batch: Batch, i: int) -> Usage:
    # A spread of ±3 % around the rate, the same shape on every side: p50s compare cleanly.
    rate = batch.rate * (1 + 0.03 * math.sin(i))
    return Usage(
        total_duration=3_000_000_000,
        load_duration=round(batch.load * 1e9),
        prompt_eval_count=batch.prompt_tokens,
        prompt_eval_duration=250_000_000,
        eval_count=200,
        eval_duration=round(200 / rate * 1e9),
        prompt_eval_cached_count=0,
        has_timings=True,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test records, once for each store: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "data" / "records.db"
    url: str = request.getfixturevalue("pg_url")
    return url


async def write_records(
    tmp_path: Path, batches: Sequence[Batch], db: Path | str | None = None
) -> Path | str:
    """The records database after these batches, in order: its path or URL."""
    settings = make_settings(tmp_path, **({} if db is None else {"db": db}))
    current: list[str | None] = [None]
    rec = Recorder(settings, CollectorRegistry(), version_of=lambda _ex: current[0])
    await rec.start()
    seq = 0
    for batch in batches:
        current[0] = batch.version
        for i in range(batch.n):
            seq += 1
            ex = exchange(
                body=chat_body(model=batch.model),
                usage=_usage(batch, i),
                started_wall=WALL0 + seq * 60,
                ex_id=f"up-{seq:06d}",
            )
            drive(rec, ex, pieces(3))
    await rec.stop()
    return settings.db_location

"""The two recorder stores side by side: records written per second at a paced 2,000
exchanges per second, and the first page of `records list --model X` and of the API over
1,000,000 records.

Writing drives the Recorder's hooks (as the relay does, bench/recorder.py's exchange) at
RATE per second for SECONDS; reported: records stored per second (from the first hook to
the queue drained), drops. Reading fills a store with ROWS synthetic records over 20
models (server-side, in a few statements), then times, warm, the median of 20 runs of
`records list --model m7` in-process (its read alone, and the whole command with the table
printed to /dev/null) and of a GET of the API's first page through a running app (real
HTTP, token auth).

PostgreSQL: --pg URL, else a temporary server from Debian's binaries (tests/support).

    .venv/bin/python -m bench.stores [--rate 2000] [--seconds 5] [--rows 1000000] [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from aiohttp import web
from prometheus_client import CollectorRegistry

from ollama_tap.app import make_app
from ollama_tap.cli import main as cli
from ollama_tap.config import Settings
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.record import COLUMNS
from ollama_tap.recorder.store import Filters, Store
from tests.support.postgres import PgServer, binaries

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recorder import _one

TOKEN = "bench-admin-token-0123456789"
_FILLED = {
    "id": "printf('b%09d', n)",
    "started": "1750000000.0 + n",
    "model": "'m' || (n % 20) || ':latest'",
}


async def write(db: Path | str, rate: int, seconds: float) -> dict[str, float]:
    registry = CollectorRegistry()
    rec = Recorder(Settings.model_validate({"db": db, "record": "full"}), registry)
    await rec.start()
    start = time.perf_counter()
    total = int(rate * seconds)
    for n in range(total):
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        _one(rec, 20)
    paced = time.perf_counter() - start
    depth = "ollama_tap_recorder_queue_depth"
    while (registry.get_sample_value(depth) or 0) > 0:  # noqa: ASYNC110 - a gauge, no event
        await asyncio.sleep(0.01)
    drained = time.perf_counter() - start
    await rec.stop()
    stored = len(list(await asyncio.to_thread(lambda: list(rec.store.each(Filters())))))
    return {
        "offered_per_s": total / paced,
        "written_per_s": stored / drained,
        "stored": stored,
        "dropped": registry.get_sample_value("ollama_tap_records_dropped_total") or 0,
    }


def _select(mark: Callable[[str], str]) -> str:
    """A SELECT of one synthetic record per `n`, in COLUMNS order."""
    values = {
        "method": "'POST'", "path": "'/api/chat'", "endpoint": "'/api/chat'",
        "outcome": "'ok'", "streamed": "1", "mode": "'metadata'", "request_bytes": "100",
        "response_bytes": "2000", "chunks": "20", "nbytes": "300", "instance": "'bench'",
        "prompt_tokens": "26", "eval_tokens": "20", "ttft": "0.1", "duration": "1.0",
    }  # fmt: skip
    values.update(_FILLED)
    return ", ".join(mark(values.get(c, "NULL")) for c in COLUMNS)


def fill_sqlite(path: Path, rows: int) -> None:
    Store(path)  # the schema comes from the writer's own migration
    rec = Recorder(Settings.model_validate({"db": path, "record": "metadata"}), CollectorRegistry())
    assert rec.writer is not None
    rec.writer.open()
    rec.writer.sink.close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"INSERT INTO records ({', '.join(COLUMNS)}) WITH RECURSIVE s(n) AS"
            f" (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows})"
            f" SELECT {_select(str)} FROM s"
        )


def fill_postgres(url: str, rows: int) -> None:
    rec = Recorder(Settings.model_validate({"db": url, "record": "metadata"}), CollectorRegistry())
    assert rec.writer is not None
    rec.writer.open()
    rec.writer.sink.close()
    pg = _select(str).replace("printf('b%09d', n)", "'b' || lpad(n::text, 9, '0')")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO records ({', '.join(COLUMNS)})"
            f" SELECT {pg} FROM generate_series(1, {rows}) AS n"
        )
        conn.execute("VACUUM ANALYZE records")


def _median_ms(run: Callable[[], Any], times: int = 20) -> float:
    run()  # warm: connections, caches
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        run()
        took.append(time.perf_counter() - t0)
    return statistics.median(took) * 1000


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        yield


def list_ms(db: Path | str) -> tuple[float, float]:
    """The command's read (its Store, opened as the command opens it, and the page), and
    the whole command, the table's rendering included."""

    def read() -> None:
        store = Store(db)
        assert len(store.page(Filters(model="m7"), 50)[0]) == 50

    def run() -> None:
        with _quiet():
            assert cli(["records", "list", "--db", str(db), "--model", "m7"]) == 0

    return _median_ms(read), _median_ms(run)


async def api_ms(db: Path | str) -> float:
    settings = Settings.model_validate(
        {"db": db, "record": "off", "admin_token": TOKEN, "upstream": "http://127.0.0.1:9"}
    )
    runner = web.AppRunner(make_app(settings, registry=CollectorRegistry()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as s:

        async def one() -> float:
            t0 = time.perf_counter()
            async with s.get(f"http://127.0.0.1:{port}/_tap/api/records?model=m7") as resp:
                body = await resp.json()
                assert resp.status == 200 and len(body["records"]) == 50, body
            return time.perf_counter() - t0

        await one()
        took = [await one() for _ in range(20)]
    await runner.cleanup()
    return statistics.median(took) * 1000


def _stores(pg: str | None, tmp: Path) -> Iterator[tuple[str, Path | str]]:
    yield "sqlite", tmp / "bench.db"
    if pg is not None:
        yield "postgres", pg
        return
    found = binaries()
    if found is None:
        sys.exit("no PostgreSQL: give --pg URL or install Debian's postgresql")
    server = PgServer(found)
    server.start()
    try:
        yield "postgres", server.url()
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--pg", help="a PostgreSQL URL (its records table is replaced)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, db in _stores(args.pg, Path(tmp)):
            w = asyncio.run(write(db, args.rate, args.seconds))
            print(name.ljust(9), "write:", "  ".join(f"{k}={v:,.1f}" for k, v in w.items()))
            _reset(db)
            t0 = time.perf_counter()
            (fill_sqlite if isinstance(db, Path) else fill_postgres)(db, args.rows)  # type: ignore[arg-type]
            filled = time.perf_counter() - t0
            (read, listed), api = list_ms(db), asyncio.run(api_ms(db))
            print(
                name.ljust(9),
                f"over {args.rows:,} records (filled in {filled:.0f} s):"
                f" records list --model m7: read {read:.1f} ms, whole command {listed:.1f} ms;"
                f" API first page {api:.1f} ms (target ≤ 50 ms)",
            )


def _reset(db: Path | str) -> None:
    if isinstance(db, Path):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        return
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS records, ollama_tap_migrations")


if __name__ == "__main__":
    main()

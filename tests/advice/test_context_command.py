"""`ollama-tap context`: a day of records tallied per model and client, the num_ctx that would
have held them and its KV cache, at 80 columns (tmux) and as JSON; and /_tap/api/context."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from ollama_tap.advice.window import tally
from ollama_tap.exchange import Usage
from ollama_tap.facts import TruncationKind, Verdict
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters, Store
from tests.advice.shapes import LLAMA3_8B
from tests.recorder.factory import chat_body, drive, exchange, make_settings
from tests.support.tmux import printed

NOW = time.time()


def usage(prompt: int, output: int) -> Usage:
    return Usage(
        total_duration=2_000_000_000, load_duration=1_000_000, prompt_eval_count=prompt,
        prompt_eval_duration=100_000_000, eval_count=output, eval_duration=900_000_000,
        prompt_eval_cached_count=None, has_timings=True,
    )  # fmt: skip


def cut(lost: int) -> Verdict:
    return Verdict(TruncationKind.PROMPT_TRUNCATED, "T2", 4096, lost, 2048, "cut")


async def record(tmp_path: Path, db: str | None = None) -> Path | str:
    """code-helper sends 10 prompts to llama3.2, 3 of them cut (the largest 2,048 + 6,000 lost
    + 100 output = 8,148 tokens); notes sends 5 that fit (at most 1,000 + 200); an old
    record outside the day, and a cloud model's, do not count."""
    settings = make_settings(tmp_path, **({"db": db} if db else {}))
    rec = Recorder(settings, CollectorRegistry())
    await rec.start()
    for i in range(10):
        ex = exchange(body=chat_body(), usage=usage(2048 if i < 3 else 900, 100),
                      started_wall=NOW - 600 + i)  # fmt: skip
        ex.client_name = "code-helper"
        ex.truncation = cut((6000, 4000, 3000)[i]) if i < 3 else None
        drive(rec, ex)
    for i in range(5):
        ex = exchange(body=chat_body(), usage=usage(1000 - i, 200), started_wall=NOW - 300 + i)
        ex.client_name = "notes"
        drive(rec, ex)
    old = exchange(body=chat_body(), usage=usage(30_000, 1), started_wall=NOW - 3 * 86_400)
    old.client_name = "notes"
    drive(rec, old)
    cloud = exchange(body=chat_body(model="gpt-oss:120b-cloud"), usage=usage(9, 9),
                     started_wall=NOW - 60)  # fmt: skip
    drive(rec, cloud)
    await rec.stop()
    return rec.store.location


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_a_window_is_tallied_per_model_and_client(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if where == "postgresql" else None
    store = Store(asyncio.run(record(tmp_path, url)))
    found = tally(store, Filters(since=NOW - 86_400))
    store.close()
    by_client = {t.client: t for t in found}
    assert list(by_client) == ["code-helper", "notes"]  # busiest first, the cloud left out
    helper, notes = by_client["code-helper"], by_client["notes"]
    assert (helper.model, helper.requests, helper.cut, helper.context) == (
        "llama3.2:latest", 10, 3, 4096,
    )  # fmt: skip
    assert helper.need is not None and (helper.need.tokens, helper.need.exact) == (8148, True)
    assert (notes.requests, notes.cut, notes.need and notes.need.tokens) == (5, 0, 1200)


async def fake_ollama() -> tuple[web.AppRunner, str]:
    async def ps(request: web.Request) -> web.Response:
        row = {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 3_000_000_000,
               "size_vram": 3_000_000_000, "context_length": 4096}  # fmt: skip
        return web.json_response({"models": [row]})

    async def show(request: web.Request) -> web.Response:
        return web.json_response(LLAMA3_8B)

    app = web.Application()
    app.router.add_get("/api/ps", ps)
    app.router.add_post("/api/show", show)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_at_80_columns_the_advice_is_whole(tmp_path: Path) -> None:
    db = await asyncio.to_thread(asyncio.run, record(tmp_path))
    runner, url = await fake_ollama()
    try:
        argv = ["context", "--db", str(db), "--url", url]
        screen = await asyncio.to_thread(printed, tmp_path, argv, 80, 30)
    finally:
        await runner.cleanup()
    assert max(len(line) for line in screen) <= 80, screen
    assert screen[0].startswith("2 model and client pairs since 20"), screen
    header = screen[1].split()
    assert header[:2] == ["model", "client"] and "cut" in header and "needs" in header, screen
    helper = next(line for line in screen if line.startswith("llama3.2") and "code-helper" in line)
    # 8,148 tokens round up to 8,192; the cache of an 8B llama there is 1 GiB (1.1 GB),
    # half a GB more than at the 4,096 it has now.
    assert "3 (30%)" in helper and "4096" in helper and "8192" in helper, helper
    assert "10" in helper.split() and helper.endswith("1.1 GB"), helper  # `more` went, at 80
    said = " ".join(line.strip() for line in screen)
    assert (
        "llama3.2:latest (code-helper): set num_ctx to 8,192 (1.1 GB of f16 KV cache, 536.9 MB "
        "more)" in said
    ), screen


def test_json_has_every_field_and_no_ollama_only_loses_the_estimates(tmp_path: Path) -> None:
    db = asyncio.run(record(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", "context", "--db", str(db), "--json",
         "--url", "http://127.0.0.1:9"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "cannot ask Ollama at http://127.0.0.1:9" in done.stderr
    docs: list[dict[str, Any]] = orjson.loads(done.stdout)
    helper = docs[0]
    assert (helper["client"], helper["num_ctx"], helper["needed"], helper["cut_share"]) == (
        "code-helper", 8192, 8148, 0.3,
    )  # fmt: skip
    assert helper["kv_bytes"] is None and helper["advice"] == "set num_ctx to 8,192"
    assert docs[1]["advice"] == "every prompt fit"


def test_a_missing_database_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", "context", "--db", str(tmp_path / "none.db")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("ollama-tap context: no database at"), done.stderr

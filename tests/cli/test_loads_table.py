"""`ollama-tap loads` at 80×24 (tmux): the signal whole, ids `records show` takes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from ollama_tap.cli.figures import id_pattern
from tests.support.tmux import printed

RUN = "3f7b6b15c585"
EVENTS: list[dict[str, Any]] = [
    {
        "id": f"load-{n}", "at": time.time() - 60 * n,
        "model": "hf.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
        "cause": cause, "detail": detail, "client": "code-helper", "address": "127.0.0.1",
        "request": f"{RUN}-{n:08d}", "load_duration": 12.5 + n, "waited": ["x"] * n,
    }
    for n, (cause, detail) in enumerate([
        ("options_changed", "num_ctx 4096 → 8192, num_batch 512 → 1024"),
        ("evicted", "evicted by qwen3:8b"),
        ("first_load", ""),
    ], start=1)
]  # fmt: skip


async def _serve() -> tuple[web.AppRunner, str]:
    async def loads(request: web.Request) -> web.Response:
        return web.json_response({"loads": EVENTS})

    app = web.Application()
    app.router.add_get("/_tap/api/loads", loads)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_loads_at_80_columns_keeps_causes_and_pasteable_ids(tmp_path: Path) -> None:
    runner, url = await _serve()
    try:
        argv = ["loads", "--url", url, "--token", "t" * 32]
        screen = await asyncio.to_thread(printed, tmp_path, argv)
    finally:
        await runner.cleanup()
    assert max(len(line) for line in screen) <= 80, screen
    header = screen[0].split()
    assert header[:6] == ["time", "model", "cause", "client", "request", "load"], screen
    rows = [line.split() for line in screen[1:4]]
    assert [row[2] for row in rows] == [e["cause"] for e in EVENTS]
    for row, event in zip(rows, EVENTS, strict=True):
        assert row[3] == "code-helper" and row[5:7] == [f"{event['load_duration']:.2f}", "s"]
        run, _, count = row[4].partition("-")  # the short id, as `records show` takes it
        assert id_pattern(row[4]) == f"{run}%-{count.zfill(8)}"
        assert event["request"].startswith(run) and event["request"].endswith(count.zfill(8))
        assert row[1].endswith(":Q4_K_M"), "the tag stays: the middle of a name is cut"

"""Retention: records past the age or the size limit are deleted and the file shrinks."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.recorder import Recorder
from ollama_tap.recorder.retention import Retention, prune, used_bytes
from ollama_tap.recorder.schema import open_writer
from ollama_tap.recorder.store import Filters
from tests.recorder.factory import WALL0, chat_body, drive, exchange, make_settings

pytestmark = pytest.mark.usefixtures("blockbuster")
DAY = 86400.0


async def fill(tmp_path: Path, n: int, prompt_size: int = 10) -> Recorder:
    """n records one hour apart, oldest first, each with a prompt of `prompt_size` bytes."""
    rec = Recorder(make_settings(tmp_path), CollectorRegistry())
    await rec.start()
    for i in range(n):
        body = chat_body(prompt=os.urandom(prompt_size // 2).hex())
        drive(rec, exchange(body=body, started_wall=WALL0 + i * 3600, ex_id=f"r{i:03d}"))
    await rec.stop()
    return rec


async def ids(rec: Recorder) -> list[str]:
    page, _ = await asyncio.to_thread(rec.store.page, Filters(), 1000)
    return sorted(r["id"] for r in page)


async def test_prune_by_age(tmp_path: Path) -> None:
    rec = await fill(tmp_path, 48)
    retention = Retention(max_age=DAY, max_bytes=1 << 40)
    now = WALL0 + 47 * 3600 + 1

    def run() -> int:
        conn = open_writer(rec.store.path)
        try:
            return prune(conn, retention, now)
        finally:
            conn.close()

    assert await asyncio.to_thread(run) == 24  # r000..r023 are a day old or more
    assert await ids(rec) == [f"r{i:03d}" for i in range(24, 48)]


async def test_prune_by_size_shrinks_the_file(tmp_path: Path) -> None:
    rec = await fill(tmp_path, 60, prompt_size=20_000)
    path = rec.store.path
    limit = 400_000
    before = path.stat().st_size

    def run() -> tuple[int, int]:
        conn = open_writer(path)
        try:
            deleted = prune(conn, Retention(max_age=1e12, max_bytes=limit), WALL0)
            return deleted, used_bytes(conn)
        finally:
            conn.close()

    deleted, used = await asyncio.to_thread(run)
    after = path.stat().st_size
    assert before > 1_000_000
    assert deleted > 0
    assert used <= limit
    assert after <= limit < before
    kept = await ids(rec)
    assert kept == [f"r{i:03d}" for i in range(60 - len(kept), 60)]  # the newest stay

"""`records list` and `records show` keep the diagnoses at 80 columns: who, truncated, cold,
slow, failed (tmux at 80×24)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Outcome, Usage
from ollama_tap.facts import GuardedField, LoadFact, LoadRole, Rewrite, TruncationKind, Verdict
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters, Store
from tests.recorder.factory import chat_body, drive, exchange, make_settings, native_usage, pieces
from tests.support.tmux import printed

COLD = Usage(
    total_duration=9_500_000_000, load_duration=4_200_000_000, prompt_eval_count=4_096,
    prompt_eval_duration=4_100_000_000, eval_count=40, eval_duration=1_000_000_000,
    prompt_eval_cached_count=0, has_timings=True,
)  # fmt: skip
VERDICT = Verdict(
    TruncationKind.PROMPT_TRUNCATED, "T2", 4096, 1_904, 6_000,
    "the prompt was longer than the context (4096) and Ollama dropped its start",
)  # fmt: skip
LOAD = {
    "id": "load-1", "at": time.time(), "model": "llama3.2:latest", "cause": "options_changed",
    "detail": "num_ctx 4096 → 8192", "changes": [], "by": None, "by_request": None,
    "request": None, "client": "code-helper", "address": "10.1.2.3", "endpoint": "/api/chat",
    "predicted": True, "load_duration": 4.2, "waited": [], "evicted": [],
    "context_length": 8192, "source": "reply",
}  # fmt: skip


async def _record(tmp_path: Path) -> Path:
    rec = Recorder(make_settings(tmp_path), CollectorRegistry())
    await rec.start()
    now = time.time()
    cut = exchange(body=chat_body(), usage=COLD, started_wall=now - 30)
    cut.client_name, cut.truncation = "code-helper", VERDICT
    cut.load_event = LoadFact(LOAD, LoadRole.TRIGGER)
    drive(rec, cut, pieces(40, start=8.1, gap=0.025))
    for i in range(4):
        fine = exchange(body=chat_body(), usage=native_usage(), started_wall=now - 20 + i)
        fine.client_name = "notes"
        if i == 0:
            fine.reload_guard = Rewrite("llama3.2:latest", (GuardedField("num_ctx", 4096, 8192),))
        drive(rec, fine, pieces(5, start=0.3))
    failed = exchange(body=chat_body(), outcome=Outcome.UPSTREAM_UNREACHABLE, status=502,
                      started_wall=now - 5)  # fmt: skip
    failed.client_name = "notes"
    drive(rec, failed)
    await rec.stop()
    return rec.store.path


def _db(tmp_path: Path) -> tuple[Path, list[dict[str, object]]]:
    db = asyncio.run(_record(tmp_path))
    return db, Store(db).page(Filters())[0]


def test_list_at_80_columns_keeps_time_client_and_marks(tmp_path: Path) -> None:
    db, records = _db(tmp_path)
    screen = printed(tmp_path, ["records", "list", "--db", str(db)])
    assert max(len(line) for line in screen) <= 80, screen
    header = screen[1].split()
    for column in ("id", "time", "model", "client", "ttft", "duration", "marks"):
        assert column in header, screen
    rows = {line.split()[0]: line for line in screen[2 : 2 + len(records)]}
    newest, oldest = screen[2], screen[1 + len(records)]
    assert newest.rstrip().endswith("error"), newest
    assert "code-helper" in oldest and "truncated" in oldest and "cold" in oldest, oldest
    assert all("notes" in row for row in list(rows.values())[1:-1])


def test_show_opens_with_the_verdicts(tmp_path: Path) -> None:
    db, records = _db(tmp_path)
    cut = records[-1]
    screen = printed(tmp_path, ["records", "show", "--db", str(db), str(cut["id"])], height=150)
    head = "\n".join(screen[:8])
    assert screen[0].startswith("ok · TTFT 8.10 s"), screen
    assert "truncated: prompt_truncated (T2), 1 904 prompt tokens lost" in head, head
    assert "load: options_changed (num_ctx 4096 → 8192), 4.20 s, triggered by this request" in head
    assert "client: code-helper (10.1.2.3)" in head, head
    assert max(len(line) for line in screen) <= 80


def test_show_says_what_the_reload_guard_sent(tmp_path: Path) -> None:
    db, records = _db(tmp_path)
    [guarded] = [r for r in records if r["reload_guard"]]
    screen = printed(tmp_path, ["records", "show", "--db", str(db), str(guarded["id"])], height=150)
    assert "reload guard: num_ctx 4096 → 8192 (the loaded model's)" in screen[:10], screen

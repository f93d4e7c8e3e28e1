"""`records list` and `records show` read by a person (tmux at 80×24) and by a script."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.cli.figures import seconds
from ollama_tap.exchange import Outcome, Usage
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters, Store
from tests.recorder.factory import chat_body, drive, exchange, make_settings, native_usage, pieces
from tests.support.tmux import printed

COLD = Usage(
    total_duration=9_500_000_000,
    load_duration=4_200_000_000,
    prompt_eval_count=3_000,
    prompt_eval_duration=4_100_000_000,
    eval_count=40,
    eval_duration=1_000_000_000,
    prompt_eval_cached_count=0,
    has_timings=True,
)


async def _record(tmp_path: Path) -> Path:
    rec = Recorder(make_settings(tmp_path), CollectorRegistry())
    await rec.start()
    long_name = chat_body(model="hf.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M")
    drive(rec, exchange(body=chat_body(), usage=native_usage()), pieces(5, start=2.9358))
    drive(rec, exchange(body=long_name, usage=COLD), pieces(40, start=8.1, gap=0.025))
    drive(rec, exchange(endpoint="/v1/chat/completions", body=chat_body()), pieces(3))
    drive(rec, exchange(endpoint="/api/embed", body={"model": "nomic-embed-text"}, streamed=False))
    for _ in range(8):
        drive(rec, exchange(body=chat_body(), outcome=Outcome.UPSTREAM_UNREACHABLE, status=502))
    drive(rec, exchange(body=chat_body(), outcome=Outcome.CLIENT_DISCONNECTED, status=None))
    await rec.stop()
    return rec.store.path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return asyncio.run(_record(tmp_path))


def cli(*argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    return done.stdout


def in_tmux(tmp_path: Path, argv: list[str]) -> list[str]:
    """The screen of an 80×24 tmux window once the command has printed."""
    return printed(tmp_path, argv)


def test_list_at_80x24_shows_every_ttft_and_duration_whole(db: Path, tmp_path: Path) -> None:
    screen = in_tmux(tmp_path, ["records", "list", "--db", str(db)])
    records, _ = Store(db).page(Filters())
    assert screen[0] == f"{len(records)} records"
    assert max(len(line) for line in screen) <= 80
    rows = screen[2:]
    assert len(rows) == len(records)
    for line, record in zip(rows, records, strict=True):
        for value in (record["ttft"], record["duration"]):
            if value is not None:
                assert f" {seconds(value)}" in line, (line, value)
    assert "2.94 s" in screen[-1] and ":Q4_K_M" in screen[-2]  # oldest last, its model shortened
    # The outcome column gives way at 80; the marks say which exchanges failed.
    failed = [r for r in records if r["outcome"] != "ok"]
    assert sum(line.rstrip().endswith("error") for line in rows) == len(failed)


def test_list_piped_cuts_nothing_and_json_parses(db: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    table = cli("records", "list", "--db", str(db), env=env)
    assert "…" not in table
    assert "hf.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M" in table
    assert table.splitlines()[1].split() == [
        "id", "time", "method", "endpoint", "model", "status", "outcome", "ttft", "duration",
        "load", "tok", "in/out", "decode", "marks",
    ]  # fmt: skip
    listed = orjson.loads(cli("records", "list", "--db", str(db), "--json"))
    assert listed == Store(db).page(Filters())[0]
    lines = cli("records", "list", "--db", str(db), "--jsonl", "--limit", "3").splitlines()
    assert [orjson.loads(line) for line in lines] == listed[:3]


def test_a_short_id_from_the_list_opens_the_record(db: Path) -> None:
    table = cli("records", "list", "--db", str(db), "--limit", "1")
    short = table.splitlines()[2].split()[0]
    newest = Store(db).page(Filters(), 1)[0][0]
    assert len(short) < len(newest["id"])
    shown = orjson.loads(cli("records", "show", "--db", str(db), short, "--json"))
    assert shown == Store(db).get(newest["id"])
    given = newest["id"][:-2]  # the start of the ids of 1 to 13
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", "records", "show", "--db", str(db), given],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "is more than one record" in done.stderr
    assert done.stderr.count("\n") == 1


def test_show_prints_units_local_times_and_rates(db: Path) -> None:
    cold = next(r for r in Store(db).each(Filters()) if (r["load"] or 0) > 1)
    shown = cli("records", "show", "--db", str(db), cold["id"])
    head = " ".join(shown.splitlines()[:2])
    assert head.startswith("ok · TTFT 8.10 s · decode 40.0 tok/s · cold start (load 4.20 s)")
    assert "long prefill (4.10 s, 43% of the server time)" in head
    assert "+00:00" in shown or "T" in shown.split("started: ")[1][:11]
    for row in ("client TTFT", "8.10 s", "prefill rate", "731.7 tok/s", "prompt tokens"):
        assert row in shown
    assert "1.0 KiB" in shown or " B," in shown  # sizes carry units
    assert "1750000000" not in shown  # no raw unix time


def test_show_says_once_why_a_route_has_no_phase_timings(db: Path) -> None:
    records = list(Store(db).each(Filters()))
    openai = next(r for r in records if r["endpoint"] == "/v1/chat/completions")
    shown = cli("records", "show", "--db", str(db), openai["id"])
    assert shown.count("OpenAI-style routes carry no phase timings") == 1
    assert "  load " not in shown and "–" not in shown
    embed = next(r for r in records if r["endpoint"] == "/api/embed")
    assert "Embeddings have no stream" in cli("records", "show", "--db", str(db), embed["id"])


async def _two_taps(tmp_path: Path) -> Path:
    """Two taps (as with one PostgreSQL store) writing one file, each with two clients."""
    for instance in ("gpu-a", "gpu-b"):
        rec = Recorder(make_settings(tmp_path, instance=instance), CollectorRegistry())
        await rec.start()
        for client in ("open-webui", "aider"):
            ex = exchange(body=chat_body(), usage=native_usage())
            ex.client_name = client
            drive(rec, ex, pieces(2))
        await rec.stop()
    return rec.store.path


def test_list_names_the_client_and_the_tap_when_there_is_more_than_one(tmp_path: Path) -> None:
    db = asyncio.run(_two_taps(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    lines = cli("records", "list", "--db", str(db), env=env).splitlines()
    header = lines[1].split()
    assert header[header.index("model") + 1 : header.index("model") + 3] == ["client", "instance"]
    rows = lines[2:]
    assert {(r.split()[5], r.split()[6]) for r in rows} == {
        (client, tap) for client in ("open-webui", "aider") for tap in ("gpu-a", "gpu-b")
    }
    one = cli("records", "list", "--db", str(db), "--instance", "gpu-a", env=env).splitlines()
    assert "instance" not in one[1].split() and "client" in one[1].split()

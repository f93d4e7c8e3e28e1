"""`ollama-tap upgrade-check` on records written through the recorder: a model that decodes
20 % slower under the new version is reported slower with exit 1, one unchanged is the same,
too few samples say so, and the output fits 80 columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ollama_tap.cli import main
from ollama_tap.upgrade.compare import compare
from ollama_tap.upgrade.samples import Side
from tests.support.old_schema import build_v1
from tests.upgrade.conftest import Batch, write_records

OLD, NEW = "0.12.3", "0.13.0"


def run(capsys: pytest.CaptureFixture[str], db: Path | str, *args: str) -> tuple[int, str, str]:
    code = main(["upgrade-check", "--db", str(db), *args])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], db: Path | str, *args: str) -> tuple[int, Any]:
    code, out, _ = run(capsys, db, "--json", *args)
    return code, orjson.loads(out)


def by_model(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["model"]: m for m in doc["models"]}


def decode_row(model: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [r for r in model["rows"] if r["figure"] == "decode_rate"]
    [row] = rows
    return row


async def test_a_model_20_percent_slower_is_reported_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], db: Path | str
) -> None:
    # Once per store: the same queries through SQLite's and PostgreSQL's Source.
    db = await write_records(tmp_path, [
        Batch(OLD, "llama3.2", 50.0), Batch(OLD, "qwen3", 80.0),
        Batch(NEW, "llama3.2", 40.0), Batch(NEW, "qwen3", 80.0),
    ], db)  # fmt: skip
    code, doc = as_json(capsys, db)
    assert code == 1 and doc["failed"]
    assert (doc["before"]["version"], doc["after"]["version"]) == (OLD, NEW)
    assert (doc["before"]["exchanges"], doc["after"]["exchanges"]) == (60, 60)
    models = by_model(doc)
    slow, same = models["llama3.2:latest"], models["qwen3:latest"]
    assert slow["verdict"] == "slower"
    assert slow["worst"]["figure"] == "decode_rate"
    row = decode_row(slow)
    assert row["ctx"] == "le4k"
    assert (row["before"]["n"], row["after"]["n"]) == (30, 30)
    assert row["ratio"] == pytest.approx(0.8, abs=0.01)
    assert row["before"]["p50"] == pytest.approx(50.0, rel=0.03)
    assert row["before"]["p95"] is not None and row["change"] == "slower"
    assert same["verdict"] == "same"
    assert decode_row(same)["ratio"] == pytest.approx(1.0, abs=0.01)
    # Every other figure was recorded alike under both versions: each is "same".
    assert {r["change"] for r in same["rows"]} == {"same"}
    assert {r["figure"] for r in same["rows"]} == {"decode_rate", "prefill_rate", "ttft"}

    code, out, _ = run(capsys, db)
    assert code == 1
    assert f"Ollama {OLD} → {NEW}" in out
    assert "llama3.2:latest: SLOWER (decode 20% slower at le4k)" in out
    assert "qwen3:latest: same" in out
    assert max(len(line) for line in out.splitlines()) <= 80


async def test_an_unchanged_version_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [
        Batch(OLD, "llama3.2", 50.0), Batch(OLD, "qwen3", 80.0),
        Batch(NEW, "llama3.2", 51.0), Batch(NEW, "qwen3", 79.0),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    assert code == 0 and not doc["failed"]
    assert {m["verdict"] for m in doc["models"]} == {"same"}
    code, out, _ = run(capsys, db)
    assert code == 0 and "llama3.2:latest: same (decode 2% faster at le4k)" in out


async def test_faster_is_a_verdict_and_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [Batch(OLD, "llama3.2", 50.0), Batch(NEW, "llama3.2", 65.0)])
    code, doc = as_json(capsys, db)
    assert code == 0
    assert by_model(doc)["llama3.2:latest"]["verdict"] == "faster"
    code, out, _ = run(capsys, db)
    assert "llama3.2:latest: faster (decode 30% faster at le4k)" in out


async def test_too_few_samples_say_so_instead_of_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [
        Batch(OLD, "llama3.2", 50.0), Batch(OLD, "qwen3", 80.0, n=5),
        Batch(NEW, "llama3.2", 50.0), Batch(NEW, "qwen3", 40.0, n=5),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    # qwen3 halved its rate, but on 5 exchanges a side: no verdict, and no failure.
    assert code == 0
    few = by_model(doc)["qwen3:latest"]
    assert few["verdict"] == "too_few_samples" and few["worst"] is None
    assert not decode_row(few)["counted"] and decode_row(few)["change"] is None
    code, out, _ = run(capsys, db)
    assert "qwen3:latest: too few samples (at most 5 a side, --min-samples 20)" in out
    assert "(few)" in out
    # A lower minimum makes it count.
    code, doc = as_json(capsys, db, "--min-samples", "5")
    assert code == 1 and by_model(doc)["qwen3:latest"]["verdict"] == "slower"


async def test_the_threshold_decides_what_counts_as_slower(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [Batch(OLD, "llama3.2", 50.0), Batch(NEW, "llama3.2", 40.0)])
    assert as_json(capsys, db, "--threshold", "0.25")[0] == 0
    assert as_json(capsys, db, "--threshold", "0.15")[0] == 1


async def test_the_last_change_by_default_or_the_versions_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [
        Batch("0.11.0", "llama3.2", 30.0), Batch(OLD, "llama3.2", 50.0),
        Batch(NEW, "llama3.2", 50.0),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    assert (doc["before"]["version"], doc["after"]["version"], code) == (OLD, NEW, 0)
    code, doc = as_json(capsys, db, "--from", "0.11.0", "--to", NEW)
    assert (doc["before"]["version"], doc["after"]["version"], code) == ("0.11.0", NEW, 0)
    assert by_model(doc)["llama3.2:latest"]["verdict"] == "faster"
    code, doc = as_json(capsys, db, "--from", OLD, "--to", "0.11.0")
    assert code == 1


async def test_records_without_a_version_are_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [
        Batch(None, "llama3.2", 10.0), Batch(OLD, "llama3.2", 50.0),
        Batch(NEW, "llama3.2", 50.0), Batch(None, "llama3.2", 10.0),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    assert code == 0 and doc["before"]["exchanges"] == 30


async def test_one_version_only_says_there_is_nothing_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [Batch(OLD, "llama3.2", 50.0)])
    code, out, err = run(capsys, db)
    assert code == 2 and not out
    assert f"every record was served by Ollama {OLD}" in err
    assert err.startswith("ollama-tap upgrade-check: ") and len(err.splitlines()) == 1


async def test_no_version_recorded_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [Batch(None, "llama3.2", 50.0)])
    code, _, err = run(capsys, db)
    assert code == 2 and "no record carries an Ollama version" in err
    code, _, err = run(capsys, tmp_path / "none.db")
    assert code == 2 and "no record carries an Ollama version" in err


def test_bad_options_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, tmp_path / "x.db", "--threshold", "10")
    assert code == 2 and "--threshold is a fraction" in err
    code, _, err = run(capsys, tmp_path / "x.db", "--min-samples", "0")
    assert code == 2 and "--min-samples" in err


async def test_load_counts_cold_starts_only_and_ttft_warm_replies_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await write_records(tmp_path, [
        Batch(OLD, "llama3.2", 50.0, load=4.0), Batch(OLD, "llama3.2", 50.0),
        Batch(NEW, "llama3.2", 50.0, load=6.0), Batch(NEW, "llama3.2", 50.0),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    rows = {r["figure"]: r for r in by_model(doc)["llama3.2:latest"]["rows"]}
    assert (rows["load"]["before"]["n"], rows["load"]["after"]["n"]) == (30, 30)
    assert rows["load"]["ratio"] == pytest.approx(1.5)
    assert (rows["ttft"]["before"]["n"], rows["decode_rate"]["before"]["n"]) == (30, 60)
    assert code == 1 and by_model(doc)["llama3.2:latest"]["worst"]["figure"] == "load"


async def test_contexts_are_compared_class_by_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Long prompts decode slower; more of them after the upgrade is no slowdown.
    db = await write_records(tmp_path, [
        Batch(OLD, "llama3.2", 50.0), Batch(OLD, "llama3.2", 20.0, prompt_tokens=30_000),
        Batch(NEW, "llama3.2", 20.0, n=60, prompt_tokens=30_000), Batch(NEW, "llama3.2", 50.0),
    ])  # fmt: skip
    code, doc = as_json(capsys, db)
    decode = {
        r["ctx"]: r for r in by_model(doc)["llama3.2:latest"]["rows"]
        if r["figure"] == "decode_rate"
    }  # fmt: skip
    assert set(decode) == {"le4k", "le64k"}
    assert (decode["le64k"]["before"]["n"], decode["le64k"]["after"]["n"]) == (30, 60)
    assert code == 0 and by_model(doc)["llama3.2:latest"]["verdict"] == "same"


async def test_a_database_left_at_an_older_schema_says_how_to_migrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old" / "records.db"
    build_v1(db)
    code, out, err = run(capsys, db)
    assert code == 2 and not out and len(err.splitlines()) == 1
    assert "start `ollama-tap serve` with this --db once to migrate it" in err


def test_a_time_that_moved_a_few_milliseconds_is_the_same() -> None:
    # 5 ms to 8 ms is 60 % longer, and jitter: same. 200 ms to 260 ms is slower.
    before, after = Side(OLD), Side(NEW)
    for i in range(20):
        before.add(("m:latest", "le4k"), None, {"ttft": 0.005, "load": 2.0 + i / 1000})
        after.add(("m:latest", "le4k"), None, {"ttft": 0.008, "load": 2.6 + i / 1000})
    doc = compare(before, after, 0.1, 20)
    rows = {r["figure"]: r for r in doc["models"][0]["rows"]}
    assert rows["ttft"]["ratio"] == pytest.approx(1.6) and rows["ttft"]["change"] == "same"
    assert rows["ttft"]["judged"] == 0.0
    assert rows["load"]["change"] == "slower" and doc["failed"]
    assert doc["models"][0]["worst"]["figure"] == "load"

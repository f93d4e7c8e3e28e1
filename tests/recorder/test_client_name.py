"""The client name in records: stored in every mode, filtered on (store, API, CLI), exported,
and added to older files by the migration."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.cli import main
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.api import filters_of
from ollama_tap.recorder.export import har, write_jsonl
from ollama_tap.recorder.schema import MIGRATIONS, VERSION, open_writer
from ollama_tap.recorder.store import Filters
from tests.recorder.factory import chat_body, drive, exchange, make_settings


async def record_three(tmp_path: Path, mode: str) -> Recorder:
    rec = Recorder(make_settings(tmp_path, record=mode), CollectorRegistry())
    await rec.start()
    for n, name in enumerate(("notebook", "curl", "notebook")):
        ex = exchange(body=chat_body(), ex_id=f"r{n}")
        ex.client_name = name
        drive(rec, ex)
    await rec.stop()
    return rec


@pytest.mark.parametrize("mode", ["full", "metadata"])
async def test_every_mode_keeps_the_name_and_filters_on_it(tmp_path: Path, mode: str) -> None:
    rec = await record_three(tmp_path, mode)
    page, _ = await asyncio.to_thread(rec.store.page, Filters(client="notebook"))
    assert [r["id"] for r in page] == ["r2", "r0"]
    assert {r["client_name"] for r in page} == {"notebook"}
    one = await asyncio.to_thread(rec.store.get, "r1")
    assert one is not None and one["client_name"] == "curl"
    if mode == "metadata":
        assert one["client"] is None, "the address stays out of metadata records"
    assert filters_of({"client": "curl"}) == Filters(client="curl")

    out = io.BytesIO()
    write_jsonl(rec.store.each(Filters(client="curl")), out)
    assert [orjson.loads(line)["client_name"] for line in out.getvalue().splitlines()] == ["curl"]
    entries = har(rec.store.each(Filters()), "test")["log"]["entries"]
    assert [e["_tap"]["client_name"] for e in entries] == ["notebook", "curl", "notebook"]


async def test_records_list_filters_by_client(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    rec = await record_three(tmp_path, "full")
    assert main(["records", "list", "--db", str(rec.store.path), "--client", "curl"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("1 record\n") and "r1" in table and "r0" not in table


def test_the_migration_adds_the_column_to_an_older_file(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    # The file as it was just before the step that adds the column, wherever it is.
    step = next(i for i, m in enumerate(MIGRATIONS) if any("client_name" in s for s in m))
    with sqlite3.connect(path) as conn:
        for statements in MIGRATIONS[:step]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {step}")
        assert "client_name" not in {row[1] for row in conn.execute("PRAGMA table_info(records)")}
    conn = open_writer(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == VERSION
        columns = {row[1] for row in conn.execute("PRAGMA table_info(records)")}
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(records)")}
    finally:
        conn.close()
    assert "client_name" in columns and "records_client_name" in indexes

"""The verdict in the record: the API's `?truncated=1`, `records list --truncated`, export."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import ollama
import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.cli import main
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.schema import VERSION
from ollama_tap.recorder.store import Filters
from tests.conftest import Proxy
from tests.recorder.factory import make_settings, stored
from tests.support.fake_ollama import FakeOllama
from tests.support.old_schema import build_v1
from tests.support.records import records


async def test_only_truncated_records_are_listed(
    proxy: Proxy,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_ollama.context_rules = True
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llama3.2", " ".join(["w"] * 5100), options={"num_ctx": 4096})
    await client.generate("llama3.2", "Why is the sky blue?", options={"num_ctx": 4096})
    every = await records(proxy, 2)
    [cut] = await records(proxy, 1, truncated="1")
    assert {r["id"] for r in every} - {cut["id"]} == {every[0]["id"]}
    assert cut["truncation"]["tokens_lost"] == 3050 and every[0]["truncation"] is None

    monkeypatch.setenv("COLUMNS", "200")
    db = str(proxy.settings.db_path)
    capsys.readouterr()  # the proxy's log lines so far
    assert main(["records", "list", "--db", db, "--truncated"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("1 record") and "prompt_truncated (T2)" in table
    assert len(table.splitlines()) == 3  # the title, the header, one record
    assert main(["records", "list", "--db", db, "--truncated", "--json"]) == 0
    assert [r["id"] for r in orjson.loads(capsys.readouterr().out)] == [cut["id"]]
    assert main(["records", "export", "--db", db, "--truncated"]) == 0
    exported = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in exported] == [cut["id"]]
    assert exported[0]["truncation"]["rule"] == "T2"


async def test_an_older_file_gains_the_column_and_its_records_have_no_verdict(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    await asyncio.to_thread(build_v1, settings.db_path)
    rec = Recorder(settings, CollectorRegistry())
    await rec.start()
    await rec.stop()
    assert (await stored(rec, "old-1"))["truncation"] is None
    assert list(rec.store.each(Filters(truncated=True))) == []
    with sqlite3.connect(settings.db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == VERSION
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(records)")}
    assert "records_truncated" in indexes

"""Exports: HAR 1.2 validates against the spec's required structure; JSONL round-trips."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.cli import main
from ollama_tap.exchange import Outcome
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.export import har, write_har, write_jsonl
from ollama_tap.recorder.store import Filters
from tests.recorder.factory import chat_body, drive, exchange, make_settings, native_usage, pieces

_NAME_VALUE = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["name", "value"],
        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
    },
}
# HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/): the required fields and types.
HAR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["log"],
    "properties": {
        "log": {
            "type": "object",
            "required": ["version", "creator", "entries"],
            "properties": {
                "version": {"const": "1.2"},
                "creator": {
                    "type": "object",
                    "required": ["name", "version"],
                    "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                },
                "entries": {"type": "array", "items": {"$ref": "#/$defs/entry"}},
            },
        }
    },
    "$defs": {
        "entry": {
            "type": "object",
            "required": [
                "startedDateTime",
                "time",
                "request",
                "response",
                "cache",
                "timings",
            ],
            "properties": {
                "startedDateTime": {"type": "string", "format": "date-time"},
                "time": {"type": "number", "minimum": 0},
                "request": {"$ref": "#/$defs/request"},
                "response": {"$ref": "#/$defs/response"},
                "cache": {"type": "object"},
                "timings": {
                    "type": "object",
                    "required": ["send", "wait", "receive"],
                    "properties": {
                        k: {"type": "number", "minimum": -1} for k in ("send", "wait", "receive")
                    },
                },
            },
        },
        "request": {
            "type": "object",
            "required": [
                "method",
                "url",
                "httpVersion",
                "cookies",
                "headers",
                "queryString",
                "headersSize",
                "bodySize",
            ],
            "properties": {
                "method": {"type": "string"},
                "url": {"type": "string", "pattern": "^https?://"},
                "httpVersion": {"type": "string"},
                "cookies": {"type": "array"},
                "headers": _NAME_VALUE,
                "queryString": _NAME_VALUE,
                "postData": {
                    "type": "object",
                    "required": ["mimeType"],
                    "properties": {"mimeType": {"type": "string"}, "text": {"type": "string"}},
                },
                "headersSize": {"type": "integer"},
                "bodySize": {"type": "integer"},
            },
        },
        "response": {
            "type": "object",
            "required": [
                "status",
                "statusText",
                "httpVersion",
                "cookies",
                "headers",
                "content",
                "redirectURL",
                "headersSize",
                "bodySize",
            ],
            "properties": {
                "status": {"type": "integer"},
                "statusText": {"type": "string"},
                "headers": _NAME_VALUE,
                "content": {
                    "type": "object",
                    "required": ["size", "mimeType"],
                    "properties": {
                        "size": {"type": "integer"},
                        "mimeType": {"type": "string"},
                        "text": {"type": "string"},
                    },
                },
                "redirectURL": {"type": "string"},
            },
        },
    },
}


@pytest.fixture
async def recorded(tmp_path: Path) -> Recorder:
    rec = Recorder(make_settings(tmp_path), CollectorRegistry())
    await rec.start()
    drive(rec, exchange(body=chat_body(), usage=native_usage()), pieces(5))
    drive(rec, exchange(body=chat_body(), streamed=False, final={"message": {"content": "hi"}}))
    drive(rec, exchange(body=chat_body(), outcome=Outcome.UPSTREAM_UNREACHABLE, status=502))
    drive(rec, exchange(body=chat_body(), outcome=Outcome.CLIENT_DISCONNECTED, status=None))
    await rec.stop()
    return rec


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_har_export_validates(
    recorded: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export.har"
    run_cli(
        capsys,
        "records",
        "export",
        "--db",
        str(recorded.store.path),
        "--format",
        "har",
        "-o",
        str(out),
    )
    assert out.stat().st_mode & 0o777 == 0o600  # prompts: as private as the database
    out.chmod(0o644)  # an earlier file of another mode, written over: private again
    run_cli(capsys, "records", "export", "--db", str(recorded.store.path), "--format", "har",
            "-o", str(out))  # fmt: skip
    assert out.stat().st_mode & 0o777 == 0o600
    document = orjson.loads(out.read_bytes())
    jsonschema.validate(document, HAR_SCHEMA, format_checker=jsonschema.FormatChecker())
    entries = document["log"]["entries"]
    assert len(entries) == 4
    assert entries[0]["timings"]["wait"] == 500.0  # time to first token, in ms
    assert entries[1]["response"]["content"]["text"] == '{"message":{"content":"hi"}}'
    assert entries[0]["response"]["content"]["text"] == "tok1 tok2 tok3 tok4 "


def test_jsonl_round_trips(recorded: Recorder, tmp_path: Path) -> None:
    out = io.BytesIO()
    assert write_jsonl(recorded.store.each(Filters()), out) == 4
    parsed = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert parsed == [recorded.store.get(r["id"]) for r in parsed]
    assert parsed == list(recorded.store.each(Filters()))


def test_cli_list_and_show(
    recorded: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    db = str(recorded.store.path)
    table = run_cli(capsys, "records", "list", "--db", db, "--outcome", "ok")
    assert "2 records" in table
    assert "/api/chat" in table
    first = next(recorded.store.each(Filters()))
    shown = run_cli(capsys, "records", "show", "--db", db, first["id"])
    assert "server TTFT" in shown and " ms " in shown
    assert "[timeline] 5 pieces (1 thinking, 4 content)" in shown
    assert main(["records", "show", "--db", db, "missing"]) == 1


def test_cli_list_keeps_whole_ids_on_a_narrow_terminal(
    recorded: Recorder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    table = run_cli(capsys, "records", "list", "--db", str(recorded.store.path))
    assert max(len(line) for line in table.splitlines()) <= 80
    rows = table.splitlines()[2:]
    newest_first = list(recorded.store.each(Filters()))[::-1]
    for row, record in zip(rows, newest_first, strict=True):
        # The short id, whole, is what `records show` and `decode --record` take.
        short = row.split()[0]
        shown = run_cli(capsys, "records", "show", "--db", str(recorded.store.path), short)
        assert record["id"] in shown


EVIL = "done\x1b]0;pwned\x07\x1b[2K\rforged\u202eevil\x9b"


async def _record(tmp_path: Path, text: str) -> tuple[str, str]:
    rec = Recorder(make_settings(tmp_path), CollectorRegistry())
    await rec.start()
    ex = exchange(body=chat_body(), streamed=False, final={"message": {"content": text}})
    ex.error_message = text
    drive(rec, ex)
    await rec.stop()
    return str(rec.store.path), ex.id


@pytest.mark.parametrize("tty", [True, False])
def test_show_prints_no_escape_sequence_to_a_terminal(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tty: bool,
) -> None:
    # A model's output (prompt injection) and Ollama's error text are other people's bytes:
    # on a terminal they are shown as escapes; piped, they stay exact.
    db, ex_id = asyncio.run(_record(tmp_path, EVIL))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    shown = run_cli(capsys, "records", "show", "--db", db, ex_id)
    if tty:
        assert not any(c in shown for c in "\x1b\x07\r\u202e\x9b")
        assert "done\\x1b]0;pwned\\x07\\x1b[2K\\x0dforged\\u202eevil\\x9b" in shown
        assert "\n[output]\n" in shown  # the layout's own newlines stay
    else:
        assert shown.count(EVIL) == 2  # output and error_message, exact


def test_har_is_written_a_record_at_a_time(recorded: Recorder) -> None:
    """The whole document was built in memory first (538 MiB for a 252 MB database): each
    entry is now on its way out before the next record is read."""
    out = io.BytesIO()
    written_before: list[int] = []

    def records() -> Any:
        for record in recorded.store.each(Filters()):
            written_before.append(len(out.getvalue()))
            yield record

    assert write_har(records(), out, "test") == 4
    assert written_before == sorted(set(written_before))  # grew between every two reads
    document = orjson.loads(out.getvalue())
    assert document == har(recorded.store.each(Filters()), "test")
    jsonschema.validate(document, HAR_SCHEMA, format_checker=jsonschema.FormatChecker())
    empty = io.BytesIO()
    assert write_har((), empty, "test") == 0
    assert orjson.loads(empty.getvalue())["log"]["entries"] == []

"""The log never carries a credential, also for requests nobody can parse."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
from pathlib import Path

import ollama
import pytest
import structlog
from aiohttp.http_exceptions import LineTooLong

from ollama_tap import logs
from ollama_tap.accesslog import AccessLog
from ollama_tap.exchange import Outcome, RequestFields
from tests.support.exchanges import new_exchange
from tests.support.fake_ollama import FakeOllama
from tests.support.serve_process import ADMIN_TOKEN, free_port, serve
from tests.support.tmux import Terminal
from tests.support.tmux import ollama_tap as tmux_command
from tests.support.waiting import eventually

MALFORMED = [
    f"GET /_tap/?token={ADMIN_TOKEN}\x01 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    f"GET /api/tags?api_key={ADMIN_TOKEN} HTTP/1.1\r\nHost: localhost\r\nX: \x7f\x01\r\n\r\n",
    "GET /_tap/api/records HTTP/1.1\r\nHost: localhost\r\n"
    f"Authorization: Bearer {ADMIN_TOKEN}{'a' * 70_000}\r\n\r\n",
]
"""Two that llhttp refuses, one with a header past the proxy's limit (431)."""


async def send(url: str, request: str) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request.encode("latin-1"))
    reply = await reader.read(-1)
    writer.close()
    return reply


async def test_a_malformed_request_is_logged_without_its_bytes(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    proc, url = await serve(fake_ollama.url, tmp_path / "r.db", capture=True)
    try:
        statuses = [(await send(url, request)).split(b" ", 2)[1] for request in MALFORMED]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await proc.communicate()
    assert statuses == [b"400", b"400", b"431"]
    logged = [line for line in stderr.splitlines() if line.startswith(b"{")]  # not the banner
    assert not [line for line in logged if ADMIN_TOKEN.encode() in line]
    lines = [json.loads(line) for line in logged]
    said = [line for line in lines if line["event"] in ("front_unparseable", "front_refused")]
    assert len(said) == len(MALFORMED), lines
    assert {line["level"] for line in said} == {"info"}
    assert not [line for line in said if "exception" in line]


def test_the_filter_keeps_other_records_and_honours_the_level() -> None:
    logger = logging.getLogger("aiohttp.server")
    bug = logger.makeRecord(logger.name, logging.ERROR, "f", 1, "Unhandled", (), None)
    assert logs.REQUEST_BYTES_FILTER.filter(bug) and bug.levelno == logging.ERROR
    try:
        raise LineTooLong(f"Bearer {ADMIN_TOKEN}", 8190)
    except LineTooLong as exc:
        info = (type(exc), exc, exc.__traceback__)
    parse = logger.makeRecord(logger.name, logging.ERROR, "f", 1, "Error from %s", ("x",), info)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        assert not logs.REQUEST_BYTES_FILTER.filter(parse)  # info, below --log-level warning
    finally:
        logger.setLevel(level)
    assert ADMIN_TOKEN not in parse.getMessage() and parse.exc_info is None
    assert (
        parse.getMessage() == "Error from x: LineTooLong, answered 400 (the request is not quoted)"
    )


@pytest.mark.parametrize(
    ("log_format", "tty", "console"),
    [("auto", True, True), ("auto", False, False), ("console", False, True), ("json", True, False)],
)
def test_the_renderer_follows_the_format_and_the_terminal(
    monkeypatch: pytest.MonkeyPatch, log_format: str, tty: bool, console: bool
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    render = logs.renderer(log_format)
    assert isinstance(render, structlog.dev.ConsoleRenderer) is console
    event = render(None, "info", {"event": "exchange", "status": 200, "ttft": 0.25})
    assert isinstance(event, str)
    if console:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", event)  # colours on a terminal
        assert "exchange" in plain and "status=200" in plain and not plain.startswith("{")
    else:
        assert json.loads(event) == {"event": "exchange", "status": 200, "ttft": 0.25}


async def test_serve_logs_readable_lines_with_log_format_console(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    proc, url = await serve(
        fake_ollama.url, tmp_path / "r.db", "--log-format", "console", capture=True
    )
    try:
        request = "GET /api/tags HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        assert (await send(url, request)).startswith(b"HTTP/1.1 200")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await proc.communicate()
    lines = stderr.decode().splitlines()
    listening = next(line for line in lines if "listening" in line)
    assert "[info" in listening and "port=" in listening and not listening.startswith("{")
    assert not [line for line in lines if line.startswith("{")]


EVERY_FIELD = {
    "id", "client", "address", "method", "path", "endpoint", "model", "status", "outcome",
    "duration_ms", "ttft_ms", "bytes_in", "bytes_out", "done_reason", "error", "retried",
}  # fmt: skip


def test_a_json_line_keeps_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("info", "json")
    try:
        ex = new_exchange("/api/chat", request=RequestFields(model="llama3.2", parsed=True))
        ex.client_name, ex.status, ex.outcome, ex.ended = "code-helper", 200, Outcome.OK, 1.0
        AccessLog(lambda name: "llama3.2:latest").response(ex)
        line = json.loads(capsys.readouterr().err.splitlines()[-1])
    finally:
        structlog.reset_defaults()
    assert line.keys() >= EVERY_FIELD
    assert (line["client"], line["address"], line["error"]) == ("code-helper", "127.0.0.1", None)


async def test_an_exchange_is_one_line_at_120_columns_on_a_terminal(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    term = Terminal(tmp_path, width=120, height=24)
    port = free_port()
    term.start(
        tmux_command("serve", "--port", str(port), "--upstream", fake_ollama.url),
        env={"OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN, "OLLAMA_TAP_DB": str(tmp_path / "r.db")},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        await eventually(lambda: any("listening" in line for line in term.screen()), within=20)
        client = ollama.AsyncClient(host=url, headers={"X-Ollama-Tap-Client": "code-helper"})
        await client.chat("llama3.2", messages=[{"role": "user", "content": "Why?"}])
        await eventually(lambda: any("/api/chat" in line for line in term.screen(joined=True)))
        [line] = [line for line in term.screen(joined=True) if "/api/chat" in line]
    finally:
        term.stop()
    assert len(line) <= 120, line
    assert "code-helper POST /api/chat llama3.2:latest 200 ok" in line, line
    assert "None" not in line and line.count("/api/chat") == 1 and "127.0.0.1" not in line
    assert re.search(r" id=[0-9a-f]+-1$", line), "the short id, which `records show` accepts"

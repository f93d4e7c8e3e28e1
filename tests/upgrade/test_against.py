"""`upgrade-check --against URL`: the box's recorded traffic re-sent to another Ollama (the
fake, answering as a new version) and compared per model and ctx class."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ollama
import orjson
import pytest

from ollama_tap.cli import main
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import records
from tests.support.waiting import eventually

SENT = 6


async def _record(proxy: Proxy, fake: FakeOllama) -> Path:
    """SENT streamed chats through the proxy, recorded under the fake's first version."""
    fake.script.token_delay = 0.002  # a decode phase of a few ms: a decode rate to compare
    await eventually(
        lambda: proxy.sample("ollama_tap_upstream_info", {"version": fake.version}) == 1
    )
    client = ollama.AsyncClient(host=proxy.url)
    for i in range(SENT):
        stream = await client.chat(
            "llama3.2", messages=[{"role": "user", "content": f"q{i}"}], stream=True
        )
        async for _ in stream:
            pass
    await records(proxy, SENT)
    return proxy.settings.db_path


async def _check(*args: str) -> int:
    return await asyncio.to_thread(main, ["upgrade-check", *args])


def _ours(out: str) -> list[str]:
    """The command's lines of stdout, without the log lines of the proxy in this process."""
    return [line for line in out.splitlines() if not line.startswith("20")]


def _document(out: str) -> Any:
    return orjson.loads("\n".join(_ours(out)))


async def test_recorded_traffic_is_re_sent_and_compared(
    proxy: Proxy, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await _record(proxy, fake_ollama)
    recorded_version = fake_ollama.version
    fake_ollama.version = "0.34.0"
    before = len(fake_ollama.received)
    args = ["--db", str(db), "--against", fake_ollama.url, "--min-samples", "3"]
    code = await _check(*args, "--json")
    doc: dict[str, Any] = _document(capsys.readouterr().out)
    assert code == (1 if doc["failed"] else 0)
    assert (doc["before"]["version"], doc["after"]["version"]) == (recorded_version, "0.34.0")
    assert doc["after"]["source"] == f"re-sent to {fake_ollama.url}"
    assert doc["against"] == {
        "url": fake_ollama.url, "answered_version": "0.34.0", "sent": SENT, "failed": 0,
        "errors": [],
    }  # fmt: skip
    chats = [r for r in fake_ollama.received[before:] if r.path_qs == "/api/chat"]
    assert len(chats) == SENT
    [model] = doc["models"]
    assert model["model"] == "llama3.2:latest"
    assert model["verdict"] in {"slower", "same", "faster"}
    decode = next(r for r in model["rows"] if r["figure"] == "decode_rate")
    assert (decode["before"]["n"], decode["after"]["n"]) == (SENT, SENT)
    assert decode["ratio"] is not None and decode["counted"]

    await _check(*args)
    out = "\n".join(_ours(capsys.readouterr().out))
    assert f"Ollama {recorded_version} → 0.34.0" in out
    assert f"{SENT} requests re-sent to {fake_ollama.url}, 0 failed" in out
    assert max(len(line) for line in out.splitlines()) <= 80


async def test_an_upstream_that_does_not_answer_is_reported_not_judged(
    proxy: Proxy, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str], unused_tcp_port: int
) -> None:
    db = await _record(proxy, fake_ollama)
    url = f"http://127.0.0.1:{unused_tcp_port}"
    code = await _check("--db", str(db), "--against", url, "--min-samples", "3", "--json")
    doc = _document(capsys.readouterr().out)
    assert code == 0
    assert doc["after"]["version"] == url and doc["against"]["failed"] == SENT
    assert {m["verdict"] for m in doc["models"]} == {"too_few_samples"}


async def test_against_refuses_what_it_cannot_do(
    proxy: Proxy, fake_ollama: FakeOllama, capsys: pytest.CaptureFixture[str]
) -> None:
    db = await _record(proxy, fake_ollama)
    code = await _check("--db", str(db), "--against", fake_ollama.url, "--to", "0.34.0")
    assert code == 2 and "--to is the version --against answers with" in capsys.readouterr().err
    code = await _check("--db", str(db), "--against", fake_ollama.url, "--from", "0.1.0")
    err = capsys.readouterr().err
    assert code == 2 and "no recorded request served by Ollama 0.1.0 can be re-sent" in err

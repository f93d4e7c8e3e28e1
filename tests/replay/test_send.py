"""`replay send`: re-sent recordings compared with what was recorded, and `--fail-if`."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import ollama
import orjson
import pytest
from yarl import URL

from ollama_tap.cli import build_parser
from ollama_tap.cli.replay import cmd_send
from ollama_tap.recorder.store import Filters, Store
from ollama_tap.replay.sending import Pace, Plan, send_all, skip_reason
from ollama_tap.replay.thresholds import parse_rule
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.script import Script
from tests.support.records import records
from tests.support.tmux import printed

TOKENS = ["The", " sky", " is", " blue", " on", " a", " clear", " day", "."]
REQUESTS = 3


async def _recorded(proxy: Proxy, fake: FakeOllama) -> None:
    fake.script = Script(tokens=TOKENS, token_delay=0.02)
    client = ollama.AsyncClient(host=proxy.url)
    for n in range(REQUESTS):
        async for _ in await client.generate("llama3.2", f"prompt {n}", stream=True):
            pass
    await client.embed("all-minilm", "a")
    await records(proxy, REQUESTS + 1)


async def _run(proxy: Proxy, fake: FakeOllama, *extra: str) -> tuple[int, str]:
    """`ollama-tap replay send` as parsed from its command line (the proxy's log lines
    share stdout in a test: the report is written apart)."""
    argv = ["replay", "send", "--db", str(proxy.settings.db_path), "--to", fake.url,
            "--fail-if", "decode_rate < 0.8", *extra]  # fmt: skip
    out = io.StringIO()
    code = await asyncio.to_thread(cmd_send, build_parser().parse_args(argv), out)
    return code, out.getvalue()


async def _send(proxy: Proxy, fake: FakeOllama, *extra: str) -> tuple[int, Any]:
    code, text = await _run(proxy, fake, "--json", *extra)
    return code, orjson.loads(text)


async def test_a_slower_decode_is_reported_and_fails(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    await _recorded(proxy, fake_ollama)
    fake_ollama.script = Script(tokens=TOKENS, token_delay=0.04)
    code, doc = await _send(proxy, fake_ollama)
    assert code == 1 and doc["failed"] is True
    assert doc["sent"] == REQUESTS + 1 and doc["changed"] == {
        "status": 0, "outcome": 0, "done_reason": 0
    }  # fmt: skip
    ratio = doc["aggregate"]["decode_rate"]["ratio"]["p50"]
    assert 0.4 <= ratio <= 0.6, ratio  # twice the delay per token: half the rate
    [check] = doc["thresholds"]
    assert check == {"rule": "decode_rate < 0.8", "ratio": ratio, "failed": True}
    decode = [r for r in doc["requests"] if r["endpoint"] == "/api/generate"]
    for r in decode:
        expected = r["now"]["decode_rate"] / r["recorded"]["decode_rate"]
        assert r["ratios"]["decode_rate"] == pytest.approx(expected)
        assert r["now"]["output_tokens"] == r["recorded"]["output_tokens"] == len(TOKENS)
    assert doc["aggregate"]["ttft"]["now"]["n"] == REQUESTS


async def test_an_unchanged_upstream_passes(proxy: Proxy, fake_ollama: FakeOllama) -> None:
    await _recorded(proxy, fake_ollama)
    code, doc = await _send(proxy, fake_ollama, "--concurrency", "1")
    ratio = doc["aggregate"]["decode_rate"]["ratio"]["p50"]
    assert (code, doc["failed"]) == (0, False), ratio
    assert 0.8 <= ratio <= 1.25
    assert doc["aggregate"]["output_tokens"]["ratio"]["p50"] == 1.0
    code, table = await _run(proxy, fake_ollama, "--model", "all-minilm")
    assert code == 1  # an embedding has no decode rate: the rule cannot pass
    assert "1 requests re-sent" in table and "recorded vs now" in table
    assert "--fail-if decode_rate < 0.8: ratio – FAILED" in table


def test_management_routes_are_not_resent_unless_asked() -> None:
    record = {"endpoint": "/api/pull", "mode": "full", "request": {"body": {"json": {}}}}
    assert "--include-management" in (skip_reason(record, False) or "")
    assert skip_reason(record, True) is None
    assert "metadata" in (skip_reason({**record, "mode": "metadata"}, True) or "")


def test_rules_and_their_errors() -> None:
    rule = parse_rule("ttft.p95 > 1.5")
    assert (rule.figure, rule.stat, rule.op, rule.number) == ("ttft", "p95", ">", 1.5)
    agg = {"ttft": {"ratio": {"p50": 1.0, "p95": 2.0}}}
    assert rule.check(agg)["failed"] is True
    assert parse_rule("ttft < 0.5").check(agg)["failed"] is False
    assert parse_rule("load < 2").check({})["failed"] is True  # no ratio: no pass
    for bad, says in (("speed < 1", "no figure"), ("ttft.p99 < 1", "no statistic"),
                      ("decode_rate", "no rule")):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            parse_rule(bad)


async def test_original_pace_keeps_the_recorded_intervals(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llama3.2", "first")
    await asyncio.sleep(0.4)
    await client.generate("llama3.2", "second")
    await records(proxy, 2)
    store = Store(proxy.settings.db_path)
    recorded = list(store.each(Filters()))
    gap = recorded[1]["started"] - recorded[0]["started"]
    sent: list[float] = []
    paces: tuple[Pace, ...] = ("original", "none")
    for pace in paces:
        start = time.perf_counter()
        plan = Plan(URL(fake_ollama.url), concurrency=2, pace=pace)
        pairs = await send_all(plan, recorded, lambda: None)
        sent.append(time.perf_counter() - start)
        assert [p["now"]["outcome"] for p in pairs] == ["ok", "ok"]
    assert sent[0] >= gap >= 0.4
    assert sent[1] < gap


async def test_at_80_columns_the_summary_fits_and_the_wide_table_waits_for_wide(
    proxy: Proxy, fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    await _recorded(proxy, fake_ollama)
    argv = ["replay", "send", "--db", str(proxy.settings.db_path), "--to", fake_ollama.url]
    screen = await asyncio.to_thread(printed, tmp_path, argv, 80, 40)
    text = "\n".join(screen)
    assert max(len(line) for line in screen) <= 80, text
    assert "…" not in text, "no cell is cut"
    assert f"{REQUESTS + 1} requests re-sent" in text and "recorded vs now" in text
    assert "--wide prints it" in text and "done_reason" not in text
    assert "decode_rate" in text and "p95 ratio" in text
    _, table = await _run(proxy, fake_ollama, "--wide")
    assert "done_reason" in table and all(r["id"] in table for r in await records(proxy, 1))

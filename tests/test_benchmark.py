"""`ollama-tap bench` against the fake Ollama (directly and through the proxy) and fixed replies."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer
from yarl import URL

from ollama_tap.benchmark import run_bench, runner
from ollama_tap.benchmark.figures import FIGURES, NEEDS_NEWER_OLLAMA, Result, quantile
from ollama_tap.benchmark.request import Sample, Target
from ollama_tap.benchmark.runner import Workload
from ollama_tap.cli import build_parser, main
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama, Script

MODEL = "llama3.2"
LOAD, QUEUE, PREFILL, TOKEN = 0.2, 0.05, 0.1, 0.02
TOKENS = ["The", " sky", " is", " blue", "."]
CLIENT_SLACK = 0.15
"""Seconds a client time may exceed the injected delays (scheduling, HTTP, the proxy, a busy CI
machine); the delays are lower bounds, and exact formulas are checked on fixed replies below."""
SERVER_SLACK = 0.06
"""The same for the phases the fake measures on its own clock."""


def timed_script(**overrides: Any) -> Script:
    values: dict[str, Any] = {
        "load_delay": LOAD,
        "queue_delay": QUEUE,
        "prefill_delay": PREFILL,
        "token_delay": TOKEN,
        "tokens": TOKENS,
    }
    return Script(**(values | overrides))


async def bench(*args: str) -> tuple[int, str]:
    """Parse as the CLI does and run on the command's own event loop, in a thread.

    The report is written to a buffer: stdout also carries the proxy's log lines in tests.
    """
    parsed = build_parser().parse_args(["bench", "--model", MODEL, *args])
    out = io.StringIO()
    code = await asyncio.to_thread(run_bench, parsed, out)
    return code, out.getvalue()


async def bench_json(*args: str) -> tuple[int, Any]:
    code, out = await bench("--json", *args)
    return code, orjson.loads(out)


def assert_close_to_truth(target: dict[str, Any]) -> None:
    figures = target["figures"]
    first = LOAD + QUEUE + PREFILL
    for stat in ("min", "p50", "max"):
        assert first <= figures["ttft"][stat] < first + CLIENT_SLACK
        assert first <= figures["ttfc"][stat] < first + CLIENT_SLACK
        assert LOAD <= figures["load"][stat] < LOAD + SERVER_SLACK
        assert QUEUE - 0.005 <= figures["queue_wait"][stat] < QUEUE + SERVER_SLACK
        assert first - 0.005 <= figures["server_ttft"][stat] < first + SERVER_SLACK
        assert -0.01 < figures["client_overhead"][stat] < CLIENT_SLACK
    duration = first + TOKEN * (len(TOKENS) - 1)
    assert duration <= figures["duration"]["p50"] < duration + CLIENT_SLACK
    # The fake reports eval_count = 5 over the 4 gaps between its chunks.
    truth = len(TOKENS) / (TOKEN * (len(TOKENS) - 1))
    assert truth * 0.5 < figures["decode_rate"]["p50"] <= truth * 1.01
    # Under load, chunks can arrive bunched: the observed rate may then exceed the paced one.
    assert 0.5 / TOKEN < figures["output_rate"]["p50"] < 2 / TOKEN
    assert figures["prefill_rate"]["n"] == 0
    assert target["notes"] == {"prefill_rate": NEEDS_NEWER_OLLAMA}


async def test_figures_match_the_injected_delays(fake_ollama: FakeOllama) -> None:
    fake_ollama.script = timed_script()
    code, doc = await bench_json("--url", fake_ollama.url, "-n", "3", "-c", "2", "--warmup", "0")
    assert code == 0
    (target,) = doc["targets"]
    assert (target["requests"], target["ok"], target["errors"]) == (3, 3, {})
    assert_close_to_truth(target)
    assert doc["ratios"] is None and doc["deltas"] is None


async def test_figures_through_the_proxy(fake_ollama: FakeOllama, proxy: Proxy) -> None:
    fake_ollama.script = timed_script()
    code, doc = await bench_json("--url", proxy.url, "-n", "3", "--api", "chat", "--warmup", "0")
    assert code == 0
    assert doc["api"] == "chat"
    assert_close_to_truth(doc["targets"][0])


async def test_warmup_requests_are_sent_but_not_counted(fake_ollama: FakeOllama) -> None:
    code, doc = await bench_json("--url", fake_ollama.url, "-n", "2", "--warmup", "2")
    generated = [r for r in fake_ollama.received if r.path_qs == "/api/generate"]
    assert (code, len(generated), doc["targets"][0]["requests"]) == (0, 4, 2)
    assert doc["workload"] == {"requests": 2, "concurrency": 1, "warmup": 2, "prompts": 1}


def _fixed_stream(lines: list[dict[str, Any]]) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        for line in lines:
            await resp.write(orjson.dumps(line) + b"\n")
        return resp

    app = web.Application()
    app.router.add_post("/api/generate", handler)
    return app


async def test_ollama_figures_are_computed_exactly_as_defined(
    aiohttp_server: AiohttpServer,
) -> None:
    final = {
        "response": "",
        "done": True,
        "created_at": "2025-01-01T00:00:01Z",
        "total_duration": 1_200_000_000,
        "load_duration": 300_000_000,
        "prompt_eval_count": 30,
        "prompt_eval_cached_count": 10,
        "prompt_eval_duration": 100_000_000,
        "eval_count": 10,
        "eval_duration": 250_000_000,
    }
    first = {"response": "Hi", "done": False, "created_at": "2025-01-01T00:00:00.5Z"}
    server = await aiohttp_server(_fixed_stream([first, final]))
    code, doc = await bench_json("--url", str(server.make_url("")), "-n", "2")
    figures = doc["targets"][0]["figures"]
    assert code == 0 and doc["targets"][0]["notes"] == {}
    assert figures["decode_rate"]["p50"] == pytest.approx(10 / 0.25)
    assert figures["prefill_rate"]["p50"] == pytest.approx((30 - 10) / 0.1)
    assert figures["queue_wait"]["p50"] == pytest.approx(1.2 - 0.3 - 0.1 - 0.25)
    assert figures["load"]["p50"] == pytest.approx(0.3)
    # First created_at − (final created_at − total): 0.5 − (1.0 − 1.2).
    assert figures["server_ttft"]["p50"] == pytest.approx(0.7)
    overhead = figures["ttft"]["p50"] - 0.7
    assert figures["client_overhead"]["p50"] == pytest.approx(overhead, abs=1e-3)
    # One output event: no observed output rate.
    assert figures["output_rate"]["n"] == 0


def _assert_summary(summary: Any, unit: str) -> None:
    assert list(summary) == ["unit", "n", "min", "p50", "p95", "p99", "max"]
    assert summary["unit"] == unit and isinstance(summary["n"], int)
    for stat in ("min", "p50", "p95", "p99", "max"):
        assert summary[stat] is None if summary["n"] == 0 else isinstance(summary[stat], float)


def _assert_comparison(comparison: Any) -> None:
    assert list(comparison) == [f.name for f in FIGURES]
    for stats in comparison.values():
        assert list(stats) == ["p50", "p95", "p99"]
        assert all(v is None or isinstance(v, float) for v in stats.values())


async def test_json_shape_is_as_documented(fake_ollama: FakeOllama, proxy: Proxy) -> None:
    code, doc = await bench_json(
        "--url", fake_ollama.url, "--compare", proxy.url, "-n", "2", "--warmup", "0"
    )
    assert code == 0
    assert list(doc) == ["version", "interrupted", "api", "workload", "targets", "ratios", "deltas"]
    assert (doc["version"], doc["interrupted"], doc["api"]) == (1, False, "generate")
    assert list(doc["workload"]) == ["requests", "concurrency", "warmup", "prompts"]
    for label, target in zip("AB", doc["targets"], strict=True):
        assert list(target) == [
            "label", "url", "model", "requests", "ok", "errors", "error_messages",
            "warmup_errors", "warmup_error_messages", "figures", "notes",
        ]  # fmt: skip
        assert (target["warmup_errors"], target["warmup_error_messages"]) == ({}, {})
        assert (target["label"], target["model"], target["requests"]) == (label, MODEL, 2)
        assert isinstance(target["url"], str) and isinstance(target["ok"], int)
        assert isinstance(target["errors"], dict) and isinstance(target["error_messages"], dict)
        assert list(target["figures"]) == [f.name for f in FIGURES]
        for f in FIGURES:
            _assert_summary(target["figures"][f.name], f.unit)
    _assert_comparison(doc["ratios"])
    _assert_comparison(doc["deltas"])


async def test_compare_through_the_proxy_is_sane(fake_ollama: FakeOllama, proxy: Proxy) -> None:
    fake_ollama.script = timed_script(load_delay=0.0, queue_delay=0.0)
    code, doc = await bench_json(
        "--url", fake_ollama.url, "--compare", proxy.url, "-n", "4", "-c", "2"
    )
    assert code == 0
    a, b = doc["targets"]
    assert (a["url"], b["url"]) == (fake_ollama.url, proxy.url)
    # In one test process the proxy's cost (well under 1 ms) is below the timers' noise
    # (bench thread, proxy and fake share one GIL): only sanity is checked here.
    assert 0.9 < doc["ratios"]["ttft"]["p50"] < 1.5
    assert doc["deltas"]["ttft"]["p50"] == pytest.approx(
        b["figures"]["ttft"]["p50"] - a["figures"]["ttft"]["p50"]
    )
    assert 0.5 < doc["ratios"]["decode_rate"]["p50"] < 2
    assert doc["ratios"]["prefill_rate"] == {"p50": None, "p95": None, "p99": None}


def _slow_relay(upstream: str, delay: float) -> web.Application:
    """A proxy that costs `delay` seconds before it forwards: a known price to measure."""

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        await asyncio.sleep(delay)
        async with (
            aiohttp.ClientSession() as session,
            session.post(upstream + request.path, data=body) as up,
        ):
            resp = web.StreamResponse(
                status=up.status, headers={"Content-Type": up.headers["Content-Type"]}
            )
            await resp.prepare(request)
            async for data in up.content.iter_any():
                await resp.write(data)
            return resp

    app = web.Application()
    app.router.add_post("/api/generate", relay)
    return app


async def test_compare_measures_what_a_proxy_costs(
    fake_ollama: FakeOllama, aiohttp_server: AiohttpServer
) -> None:
    fake_ollama.script = timed_script(load_delay=0.0, queue_delay=0.0)
    cost = 0.05
    server = await aiohttp_server(_slow_relay(fake_ollama.url, cost))
    slow = str(server.make_url("")).rstrip("/")
    code, doc = await bench_json("--url", fake_ollama.url, "--compare", slow, "-n", "3")
    ratios, deltas = doc["ratios"], doc["deltas"]
    assert code == 0
    truth = (PREFILL + cost) / PREFILL
    assert truth * 0.85 < ratios["ttft"]["p50"] < truth * 1.25
    for figure in ("ttft", "ttfc", "duration", "client_overhead"):
        assert cost - 0.02 < deltas[figure]["p50"] < cost + 0.04
    # Ollama's side did not change: its own figures are the same on both.
    assert 0.9 < ratios["server_ttft"]["p50"] < 1.1
    assert abs(deltas["queue_wait"]["p50"]) < 0.01


async def test_compare_interleaves_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[tuple[str, str]] = []

    async def fake_send(session: object, target: Target, prompt: str) -> Sample:
        order.append((target.url.host or "", prompt))
        return Sample(kind="ok")

    monkeypatch.setattr(runner, "send", fake_send)
    targets = [Target(URL("http://a"), MODEL), Target(URL("http://b"), MODEL)]
    workload = Workload(["p0", "p1", "p2"], requests=5, concurrency=2, warmup=1)
    results = [Result(target) for target in targets]
    await runner.run(results, workload, lambda: None)
    assert [(len(r.warmup), len(r.samples)) for r in results] == [(1, 5), (1, 5)]
    assert order == [
        ("a", "p0"), ("b", "p0"),  # warm-up
        ("a", "p0"), ("a", "p1"), ("b", "p0"), ("b", "p1"),
        ("a", "p2"), ("a", "p0"), ("b", "p2"), ("b", "p0"),
        ("a", "p1"), ("b", "p1"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "kind", "message"),
    [
        (
            Script(status_error=(503, "server busy, please try again.  maximum pending requests")),
            "upstream_error",
            "HTTP 503: server busy, please try again.  maximum pending requests",
        ),
        (Script(error_after=2), "stream_error", "an error was encountered while running the model"),
        (Script(no_final=True), "incomplete", "the stream ended without Ollama's final object"),
    ],
)
async def test_a_failing_upstream_is_reported_per_request(
    fake_ollama: FakeOllama,
    proxy: Proxy,
    script: Script,
    kind: str,
    message: str,
) -> None:
    fake_ollama.script = script
    for url in (fake_ollama.url, proxy.url):
        code, doc = await bench_json("--url", url, "-n", "3")
        target = doc["targets"][0]
        assert code == 1
        assert (target["ok"], target["errors"]) == (0, {kind: 3})
        assert target["error_messages"] == {kind: [message]}
        assert all(summary["n"] == 0 for summary in target["figures"].values())


async def test_a_cut_connection_is_incomplete(fake_ollama: FakeOllama) -> None:
    fake_ollama.script = Script(die_after=2)
    code, doc = await bench_json("--url", fake_ollama.url, "-n", "2")
    assert (code, doc["targets"][0]["errors"]) == (1, {"incomplete": 2})


async def test_a_dead_port_is_unreachable(unused_tcp_port: int, proxy_factory: MakeProxy) -> None:
    dead = f"http://127.0.0.1:{unused_tcp_port}"
    code, doc = await bench_json("--url", dead, "-n", "2", "--warmup", "0")
    target = doc["targets"][0]
    assert (code, target["errors"]) == (1, {"upstream_unreachable": 2})
    assert "Cannot connect" in target["error_messages"]["upstream_unreachable"][0]
    # Through a proxy whose upstream is dead: the proxy's 502 and its message.
    proxy = await proxy_factory(upstream=dead)
    code, doc = await bench_json("--url", proxy.url, "-n", "1", "--warmup", "0")
    (message,) = doc["targets"][0]["error_messages"]["upstream_error"]
    assert code == 1 and message.startswith("HTTP 502: ollama-tap: cannot reach Ollama")


async def test_the_table_shows_figures_notes_and_errors(
    fake_ollama: FakeOllama, unused_tcp_port: int
) -> None:
    dead = f"http://127.0.0.1:{unused_tcp_port}"
    code, out = await bench("--url", fake_ollama.url, "--compare", dead, "-n", "2")
    assert code == 1
    note = f"A: prefill rate: {NEEDS_NEWER_OLLAMA}"
    for text in ("time to first token", note, "upstream_unreachable", "B / A"):
        assert text in out


async def test_prompts_file(fake_ollama: FakeOllama, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\n\ntwo\n")
    code, doc = await bench_json(
        "--url", fake_ollama.url, "--prompts", str(prompts), "-n", "3", "--warmup", "0"
    )
    sent = [orjson.loads(r.body)["prompt"] for r in fake_ollama.received]
    assert (code, sent, doc["workload"]["prompts"]) == (0, ["one", "two", "one"], 2)


async def test_the_command_is_registered(
    capsys: pytest.CaptureFixture[str], fake_ollama: FakeOllama
) -> None:
    argv = ["bench", "--model", MODEL, "--url", fake_ollama.url, "-n", "1", "--json"]
    code = await asyncio.to_thread(main, argv)
    assert code == 0 and orjson.loads(capsys.readouterr().out)["targets"][0]["ok"] == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--prompts", "{empty}"], "holds no prompt; write one prompt per line"),
        (["--url", "ftp://x"], "unsupported scheme"),
        (["--compare", ""], "--compare needs a URL (it was empty)"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], error: str
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    argv = [a.format(empty=empty) for a in args]
    assert main(["bench", "--model", MODEL, *argv]) == 2
    assert error in capsys.readouterr().err


def test_quantiles_interpolate_between_ranks() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.99) == pytest.approx(3.97)
    assert quantile([7.0], 0.95) == 7.0


def test_tables_fit_80_columns_without_cutting_numbers() -> None:
    """Numbers are never ellipsised on a narrow terminal (the names wrap instead), and big
    rates are shown compactly."""
    from rich.console import Console

    from ollama_tap.benchmark.report import _number, render

    rate = FIGURES[[f.name for f in FIGURES].index("output_rate")]
    ms = FIGURES[[f.name for f in FIGURES].index("ttft")]
    assert [_number(v, rate) for v in (73_050.0, 1_203_000.0, 999.4, 12.34)] == [
        "73.0k", "1.20M", "999", "12.3"
    ]  # fmt: skip
    assert [_number(v, ms, signed=True) for v in (0.00048, 0.0153, 1.2)] == [
        "+0.48", "+15.3", "+1200"
    ]  # fmt: skip
    summary = {"n": 3, "min": 48_400.0, "p50": 73_100.0, "p95": 176_400.0, "p99": 182_000.0}
    summary["max"] = 183_400.0
    figures = {f.name: {**summary, "unit": f.unit} for f in FIGURES}
    target = {
        "label": "A", "url": "http://127.0.0.1:11434", "model": "llama3.2", "requests": 3,
        "ok": 3, "errors": {}, "error_messages": {}, "warmup_errors": {},
        "warmup_error_messages": {}, "figures": figures, "notes": {},
    }  # fmt: skip
    ratios = {f.name: dict.fromkeys(("p50", "p95", "p99"), 1.6412) for f in FIGURES}
    deltas = {f.name: dict.fromkeys(("p50", "p95", "p99"), 3617.0) for f in FIGURES}
    doc = {
        "interrupted": False,
        "api": "generate",
        "workload": {"requests": 3, "concurrency": 1, "warmup": 0, "prompts": 1},
        "targets": [target, {**target, "label": "B"}],
        "ratios": ratios,
        "deltas": deltas,
    }
    console = Console(width=80, record=True)
    render(console, doc)
    out = console.export_text()
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "176.4k" in out and "1.64×" in out


FINAL = {"model": MODEL, "response": "", "done": True, "done_reason": "stop", "eval_count": 1}


def _replies(*statuses: int) -> web.Application:
    """Answers the n-th request with the n-th status (then 200): an error body that is not
    Ollama's shape, or a one-token stream with its final object."""
    left = list(statuses)

    async def generate(request: web.Request) -> web.StreamResponse:
        await request.read()
        status = left.pop(0) if left else 200
        if status != 200:
            return web.json_response({"detail": "Not authenticated"}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        await resp.write(b'{"model":"llama3.2","response":"Hi","done":false}\n')
        await resp.write(orjson.dumps(FINAL) + b"\n")
        return resp

    app = web.Application()
    app.router.add_post("/api/generate", generate)
    return app


async def test_an_error_body_not_in_ollamas_shape_is_shown(aiohttp_server: AiohttpServer) -> None:
    server = await aiohttp_server(_replies(401, 401))
    code, doc = await bench_json("--url", str(server.make_url("")), "-n", "1")
    assert code == 1
    assert doc["targets"][0]["error_messages"] == {
        "upstream_error": ['HTTP 401: {"detail": "Not authenticated"}']
    }


async def test_a_failed_warmup_is_reported_but_not_counted(
    aiohttp_server: AiohttpServer,
) -> None:
    url = str((await aiohttp_server(_replies(500))).make_url(""))
    code, doc = await bench_json("--url", url, "-n", "2")
    target = doc["targets"][0]
    assert (code, target["requests"], target["ok"], target["errors"]) == (0, 2, 2, {})
    assert target["warmup_errors"] == {"upstream_error": 1}
    assert target["warmup_error_messages"] == {
        "upstream_error": ['HTTP 500: {"detail": "Not authenticated"}']
    }
    url = str((await aiohttp_server(_replies(500))).make_url(""))
    code, table = await bench("--url", url, "-n", "2")
    assert 'A: warm-up (not counted): 1 upstream_error — HTTP 500: {"detail"' in table


async def test_an_interrupted_run_reports_what_ended_and_exits_130(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Ctrl-C arrives as KeyboardInterrupt out of the event loop; the requests that ended
    # before it are reported, flagged, and the exit status says the run was cut short.
    sent = 0

    async def send(session: object, target: Target, prompt: str) -> Sample:
        nonlocal sent
        sent += 1
        if sent == 5:
            raise KeyboardInterrupt
        return Sample(kind="ok", values={"ttft": 0.01 * sent})

    monkeypatch.setattr(runner, "send", send)
    code, doc = await bench_json("--url", "http://127.0.0.1:9", "-n", "10", "--warmup", "1")
    target = doc["targets"][0]
    assert (code, doc["interrupted"]) == (130, True)
    assert (target["requests"], target["ok"]) == (3, 3)  # 1 warm-up, 3 counted, then Ctrl-C
    assert target["figures"]["ttft"]["max"] == pytest.approx(0.04)


def test_a_model_name_is_never_read_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    from ollama_tap.benchmark import _measure

    async def send(session: object, target: Target, prompt: str) -> Sample:
        return Sample(kind="ok")

    monkeypatch.setattr(runner, "send", send)
    results = [Result(Target(URL("http://127.0.0.1:9"), "[/oops]"))]
    _measure(results, Workload(["p"], requests=2, concurrency=1, warmup=0), show_progress=True)
    assert len(results[0].samples) == 2


def test_a_count_that_is_no_number_is_named_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--model", MODEL, "-n", "abc"])
    assert exit_.value.code == 2
    assert "argument -n: 'abc' is not a whole number" in capsys.readouterr().err

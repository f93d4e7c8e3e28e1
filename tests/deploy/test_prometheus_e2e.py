"""End to end with a real Prometheus: fake Ollama → proxy → Prometheus → every dashboard query.

A `prometheus` process (from PATH) scrapes the proxy every second and evaluates the real rule
file. The official `ollama` and `openai` clients drive traffic in two rounds (the first creates
the series, the second moves their rates), then every panel's query, its variables filled in,
goes through Prometheus's HTTP API and must return a finite figure.

The decode-slowdown scenario runs twice over: live, the rate pair Prometheus scraped drops when
the fake decodes slower; and through `promtool test rules`, with input series built from that
scrape (its label sets and the per-reply token and second increments it measured, replayed a
day long at production pace, since the rule's windows are 10 minutes and a day).
"""

from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import aiohttp
import ollama
import openai
import pytest
import yaml

from tests.conftest import Proxy
from tests.deploy.stack import (
    RULES,
    SCRAPE_SERIES,
    UNPACKS,
    exported,
    metric_names,
    promtool,
    queries,
    recording_rules,
    rules_for,
    run,
    substitute,
    tool,
)
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.context import context_size_error

JOB = "ollama-tap"
# Queries on these metrics may legitimately come back empty in a short test; the metric must
# still be in the proxy's /metrics and the query valid PromQL.
MAY_BE_EMPTY = {
    "ollama_tap_observer_errors_total": "no observer fails here",
    "ollama_tap_model_unloads_total": "an unload shows only if a poll lands between two calls",
    "ollama_tap_model_evictions_total": "one model at a time here: nothing is evicted",
    "ollama_tap_reload_predicted_total": "no request here asks a resident model for other options",
    "ollama_tap_routed_total": "several named boxes only; one plain upstream here (tests/boxes)",
}
OPT_IN = {
    "ollama_tap_reload_guard_rewrites_total": "registered with --reload-guard only, off here "
    "(tests/test_guard.py scrapes it)",
}
PER_BOX: Final = 'upstream!=""'
"""The selector of the Boxes row's request panels: no series has `upstream` with one plain
upstream, as here (tests/boxes/test_counters.py scrapes the labelled counters)."""
DAY_BEFORE = {
    "ollama_tap:decode_tokens_per_second:ratio1d_offset1d": "the day before the last 24 hours "
    "(DecodeSlowdown's baseline): no scrape of a test reaches back that far",
}


# -- Prometheus ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """A running Prometheus and its HTTP query API."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        async with self.session.get(f"{self.url}/api/v1/query", params=params) as resp:
            body = await resp.json()
        assert body["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def value(self, expr: str) -> float | None:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if result else None

    async def wait_for(self, expr: str, want: float) -> None:
        """Wait up to 30 s until `expr` evaluates to `want` (e.g. a counter the proxy holds)."""
        deadline = asyncio.get_running_loop().time() + 30
        while (got := await self.value(expr)) != want:
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"Prometheus never saw {expr} == {want} (last: {got})")
            await asyncio.sleep(0.25)


@asynccontextmanager
async def prometheus(tmp_path: Path, target: str) -> AsyncIterator[Prometheus]:
    binary = tool("prometheus", UNPACKS)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, never waited on in the loop
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                if proc.poll() is not None:
                    pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
                try:
                    async with session.get(f"{url}/-/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.25)
            else:
                pytest.fail("prometheus did not become ready in 30 s")
            prom = Prometheus(url, session)
            await prom.wait_for(f'up{{job="{JOB}"}}', 1)
            yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def total(proxy: Proxy, name: str) -> float:
    """Sum of a counter over all its label sets, as the proxy holds it right now."""
    return sum(
        s.value
        for metric in proxy.registry.collect()
        for s in metric.samples
        if s.name == name and not s.name.endswith("_created")
    )


async def scraped(prom: Prometheus, proxy: Proxy) -> None:
    """Wait until Prometheus holds the proxy's current request and decode counts."""
    for name in ("ollama_tap_requests_total", "ollama_tap_decode_tokens_total"):
        await prom.wait_for(f'sum({name}{{job="{JOB}"}})', total(proxy, name))
    await asyncio.sleep(2.5)  # two more scrapes, so every rate has a point on both sides


# -- traffic -------------------------------------------------------------------------------


async def drive(proxy: Proxy, fake: FakeOllama) -> None:
    """One round of everything the dashboard shows: native, /v1, errors, 503, a cold start."""
    client = ollama.AsyncClient(host=proxy.url)
    chat = [{"role": "user", "content": "Why is the sky blue?"}]
    fake.script = Script(
        tokens=["The", " sky", " is", " blue", " because", " of", " Rayleigh", "."],
        token_delay=0.01,
        prefill_delay=0.01,
        prompt_eval_cached_count=10,
    )
    async for _ in await client.generate(model="llama3.2", prompt="Why?", stream=True):
        pass
    async for _ in await client.chat(model="llama3.2", messages=chat, stream=True):
        pass
    await client.generate(model="llama3.2", prompt="Why?", stream=False)
    await client.embed(model="all-minilm", input="sky")
    fake.script.thinking = ["Rayleigh", " scattering"]
    async for _ in await client.chat(model="qwen3:8b", messages=chat, think=True, stream=True):
        pass
    fake.script.thinking = []
    fake.script.done_reason = "length"
    await client.generate(model="llama3.2", prompt="Why?", options={"num_ctx": 40})
    fake.script.done_reason = "stop"

    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama")
    async for _ in await oai.chat.completions.create(
        model="llama3.2",
        messages=chat,
        stream=True,  # type: ignore[arg-type]
    ):
        pass

    fake.script.status_error = (
        503,
        "server busy, please try again.  maximum pending requests exceeded",
    )
    with pytest.raises(ollama.ResponseError):
        await client.generate(model="llama3.2", prompt="Why?")
    fake.script.status_error = (400, context_size_error(5000, 4096))  # a refused overflow
    with pytest.raises(ollama.ResponseError):
        await client.generate(model="llama3.2", prompt="Why?")
    fake.script.status_error = None
    async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/api/nope") as r:
        assert r.status == 404

    fake.script.load_delay = 1.1  # a cold start
    await client.generate(model="qwen3:8b", prompt="Why?")
    fake.script.load_delay = 0
    await client.generate(model="qwen3:8b", prompt="", keep_alive=0)  # unload


# -- the dashboard against the real scrape -------------------------------------------------


async def test_every_dashboard_query_returns_data(
    proxy: Proxy, fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    target = proxy.url.removeprefix("http://")
    async with prometheus(tmp_path, target) as prom:
        for _ in range(2):
            await drive(proxy, fake_ollama)
            await scraped(prom, proxy)
        async with (
            aiohttp.ClientSession() as session,
            session.get(proxy.url + proxy.settings.metrics_path) as resp,
        ):
            exposition = await resp.text()
        families = set(re.findall(r"^# TYPE (\S+) ", exposition, re.MULTILINE))

        problems: list[str] = []
        for q in queries():
            names = metric_names(q.expr) - recording_rules() - SCRAPE_SERIES - OPT_IN.keys()
            missing = {n for n in names if not exported(n, families)}
            if missing:
                problems.append(f"{q.panel}/{q.ref}: the proxy exports no {sorted(missing)}")
                continue
            result = await prom.query(substitute(q.expr))
            finite = [r for r in result if math.isfinite(float(r["value"][1]))]
            if metric_names(q.expr) & (DAY_BEFORE.keys() | OPT_IN.keys()):
                continue
            if not finite and not names & MAY_BE_EMPTY.keys() and PER_BOX not in q.expr:
                problems.append(f"{q.panel}/{q.ref}: no data ({result}) from {q.expr}")
        assert not problems, "\n".join(problems)

        # The recording rules run on the real series too.
        for record in (
            "ollama_tap:decode_tokens_per_second:ratio10m",
            "ollama_tap:requests:increase10m",
        ):
            assert await prom.query(record), f"recording rule {record} has no data"


# -- decode slowdown -----------------------------------------------------------------------

SERIES = {
    "tokens": "ollama_tap_decode_tokens_total",
    "seconds": "ollama_tap_decode_seconds_total",
    "replies": "ollama_tap_decode_tokens_per_second_count",
}


async def decode_round(proxy: Proxy, fake: FakeOllama, token_delay: float, n: int = 12) -> None:
    fake.script = Script(tokens=[f" t{i}" for i in range(30)], token_delay=token_delay)
    client = ollama.AsyncClient(host=proxy.url)

    async def one() -> None:
        async for _ in await client.generate(model="llama3.2", prompt="count", stream=True):
            pass

    for _ in range(n // 4):
        await asyncio.gather(*(one() for _ in range(4)))


async def snapshot(prom: Prometheus) -> dict[str, list[dict[str, Any]]]:
    return {k: await prom.query(f'{name}{{job="{JOB}"}}') for k, name in SERIES.items()}


def delta(before: dict[str, Any], after: dict[str, Any], key: str) -> float:
    (b,), (a,) = before[key], after[key]
    return float(a["value"][1]) - float(b["value"][1])


async def test_decode_slowdown_fires_on_the_scraped_series(
    proxy: Proxy, fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    target = proxy.url.removeprefix("http://")
    async with prometheus(tmp_path, target) as prom:
        phases: list[Callable[[], Awaitable[None]]] = [
            lambda: decode_round(proxy, fake_ollama, 0.002, n=4),  # creates the series
            lambda: decode_round(proxy, fake_ollama, 0.002),  # fast
            lambda: decode_round(proxy, fake_ollama, 0.008),  # four times slower
        ]
        snaps = []
        for phase in phases:
            await phase()
            await scraped(prom, proxy)
            snaps.append(await snapshot(prom))
    start, fast, slow = snaps
    per_reply = {
        name: {k: delta(a, b, k) / delta(a, b, "replies") for k in SERIES}
        for name, (a, b) in {"fast": (start, fast), "slow": (fast, slow)}.items()
    }
    fast_rate = per_reply["fast"]["tokens"] / per_reply["fast"]["seconds"]
    slow_rate = per_reply["slow"]["tokens"] / per_reply["slow"]["seconds"]
    assert slow_rate < 0.7 * fast_rate, f"the scrape shows {fast_rate} then {slow_rate} tok/s"

    labels = {k: series[0]["metric"] for k, series in slow.items()}
    test_file = slowdown_rule_test(labels, per_reply)
    (tmp_path / "decode.rules.yml").write_text(yaml.safe_dump(rules_for("DecodeSlowdown")))
    (tmp_path / "slowdown.test.yml").write_text(yaml.safe_dump(test_file, sort_keys=False))
    run(promtool(), "test", "rules", "slowdown.test.yml", cwd=tmp_path)


def selector(metric: dict[str, str]) -> str:
    name = metric["__name__"]
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__") + "}"


def slowdown_rule_test(
    labels: dict[str, dict[str, str]], per_reply: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """A promtool test replaying the scraped per-reply increments: two days fast (the rule's
    baseline is the day before the last one), then 30 min slow.

    Replies per minute are set so the rule's traffic guard (60 s of decoding and 5 replies in
    10 minutes) is met by the slow phase, as a busy production model would meet it.
    """
    per_minute = max(1, math.ceil(2 * 6 / per_reply["slow"]["seconds"]))

    def values(key: str, slow_minutes: int, slow: str = "slow") -> str:
        step, after = per_reply["fast"][key] * per_minute, per_reply[slow][key] * per_minute
        return f"0+{step!r}x2880 {2880 * step + after!r}+{after!r}x{slow_minutes}"

    def case(name: str, slow: str, expect: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "name": name,
            "interval": "1m",
            "input_series": [
                {"series": selector(labels[k]), "values": values(k, 40, slow)} for k in SERIES
            ],
            "promql_expr_test": [
                {
                    "expr": 'ALERTS{alertname="DecodeSlowdown", alertstate="firing"}',
                    "eval_time": "2910m",
                    "exp_samples": expect,
                }
            ],
        }

    tokens = labels["tokens"]
    alert = (
        'ALERTS{alertname="DecodeSlowdown", alertstate="firing", severity="warning", '
        f'job="{tokens["job"]}", instance="{tokens["instance"]}", model="{tokens["model"]}", '
        f'ctx="{tokens["ctx"]}"}}'
    )
    return {
        "rule_files": ["decode.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            case("the scraped slowdown pages", "slow", [{"labels": alert, "value": 1}]),
            case("the scraped fast rate all along does not", "fast", []),
        ],
    }

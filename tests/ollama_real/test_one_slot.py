"""One runner slot (OLLAMA_NUM_PARALLEL=1), two clients: the second waits for the first, and
the proxy's queue wait says for how long; a client that leaves frees the slot at once.

Both are read on Ollama's own clock, not against a wall-time bound: a request's start is its
final `created_at` less its `total_duration` (the handler's first instant, `checkpointStart` in
server/routes.go), and a chunk's `created_at` is stamped as the runner hands it over. In
Ollama 0.24 a request for a loaded model waits in the runner's semaphore (`llmServer.sem`,
llm/server.go, sized by OLLAMA_NUM_PARALLEL) and then in the runner's own (`seqsSem`,
runner/ollamarunner/runner.go); in v0.30.0 in `llamaServerRunner.sem` (llm/llama_server.go
:795, taken in `Completion` :1290, sized by OLLAMA_NUM_PARALLEL) and then in llama-server's
one slot (`-np` :340). Either way the waits fall in no phase Ollama reports, so they are what
the proxy calls queue wait: total − load − prompt_eval − eval. A client that leaves cancels
the handler's context: 0.24 drops the sequence, v0.30.0 closes its request to llama-server
(`NewRequestWithContext` :1379, `ctx.Done()` in the stream loop :1421), which stops the task.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Final

import aiohttp
import orjson
import pytest

from tests.conftest import Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama, call
from tests.support.metrics import hist, settled
from tests.support.records import records

NS: Final = 1e9
PROMPT: Final = "Count from one to two hundred, one number per line."
GREEDY: Final = {"temperature": 0, "seed": 7}
LONG: Final = 128
"""Tokens the leaving client asks for: far more than it reads before it goes."""


def clock(created_at: str) -> float:
    """An Ollama `created_at` as seconds on Ollama's clock (microseconds kept)."""
    return datetime.fromisoformat(created_at).timestamp()


def began(final: dict[str, Any]) -> float:
    """When Ollama's handler started on a request: its final `created_at` less its total."""
    return clock(final["created_at"]) - float(final["total_duration"]) / NS


def residual(final: dict[str, Any]) -> float:
    """The final object's time in no phase (the proxy's queue wait, computed from Ollama)."""
    phases = final["load_duration"] + final["prompt_eval_duration"] + final["eval_duration"]
    return float(final["total_duration"] - phases) / NS


def per_token(final: dict[str, Any]) -> float:
    """Seconds of decode per generated token, as Ollama measured it."""
    return float(final["eval_duration"]) / NS / final["eval_count"]


def body(num_predict: int, stream: bool) -> dict[str, Any]:
    options = {**GREEDY, "num_predict": num_predict}
    return {"model": MODEL, "prompt": PROMPT, "options": options, "stream": stream}


@BOTH_RELEASES
async def test_the_second_client_waits_for_the_first_and_the_proxy_says_how_long(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """The first client holds the slot (its first token is out) when the second arrives; the
    second's queue wait, in the record and the histogram, is the part of the first's run it
    overlapped, as Ollama's clock has it."""
    await call(real_ollama.url, "POST", "/api/generate", body(1, False))  # loaded, warm
    first_lines: list[dict[str, Any]] = []
    second: asyncio.Task[Any] | None = None
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            tapped.url + "/api/generate", json=body(48, True),
            headers={"X-Ollama-Tap-Client": "first"},
        ) as resp,
    ):  # fmt: skip
        async for line in resp.content:
            first_lines.append(orjson.loads(line))
            if second is None and first_lines[-1].get("response"):
                named = {"X-Ollama-Tap-Client": "second"}
                sent = call(tapped.url, "POST", "/api/generate", body(8, False), named)
                second = asyncio.create_task(sent)
    assert second is not None
    first, later = first_lines[-1], (await second).json()
    assert first["done"] and later["done"]
    overlap = clock(first["created_at"]) - began(later)
    assert overlap > 10 * per_token(first), "the second request came after the first ended"

    await settled(tapped)
    by_client = {r["client_name"]: r for r in await records(tapped, 2)}
    waited = by_client["second"]["queue_wait"]
    assert waited == pytest.approx(residual(later), abs=1e-9)
    count, seconds = hist(tapped, "queue_wait_seconds", endpoint="/api/generate", model=MODEL,
                          stream="false")  # fmt: skip
    assert (count, seconds) == (1, pytest.approx(waited, abs=1e-9))
    # The wait ends once the first's final object is out and its slot free: never sooner (less
    # the scheduler's instant, which Ollama counts as the second's load), later only by the
    # second's own templating and hand-over, a small part of what it waited.
    assert waited >= overlap - later["load_duration"] / NS - 1e-3, (waited, overlap)
    assert waited - overlap < 0.1 * overlap, (waited, overlap)
    assert by_client["first"]["queue_wait"] < 0.1 * waited


@BOTH_RELEASES
async def test_a_client_that_leaves_stops_the_generation(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """Counted in tokens on Ollama's clock, not in seconds: a request sent right after the
    leaving client is the same request, so it generates what the first would have (greedy:
    LONG tokens, stopped by length, which shows the first would have run on). The slot must
    free at once: the time from the last chunk the leaving client read to the second's start
    of work, in its decode time per token, is the tokens generated after the client left."""
    await call(real_ollama.url, "POST", "/api/generate", body(1, False))  # loaded, warm
    read: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as s,
        s.post(tapped.url + "/api/generate", json=body(LONG, True)) as resp,
    ):
        async for line in resp.content:
            read.append(orjson.loads(line))
            if sum(1 for chunk in read if chunk.get("response")) == 2:
                break
    # The session is closed: the connection with it, mid-stream.
    after = (await call(real_ollama.url, "POST", "/api/generate", body(LONG, False))).json()
    assert (after["eval_count"], after["done_reason"]) == (LONG, "length")
    # Its wait for the slot starts after the scheduler's instant (its load) and is at most
    # its whole residual: an upper bound of when the leaving client's generation stopped.
    freed = began(after) + (after["load_duration"] / NS) + residual(after)
    generated_after = (freed - clock(read[-1]["created_at"])) / per_token(after)
    assert generated_after < LONG / 4, f"{generated_after:.0f} tokens after the client left"

    await settled(tapped)
    [left] = await records(tapped, 1)
    assert left["outcome"] == "client_disconnected"

"""The workload: warm-up, then N requests per target at a concurrency, interleaved when compared."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp

from ollama_tap.benchmark.figures import Result
from ollama_tap.benchmark.request import send

CONNECT_TIMEOUT: Final = 10.0
"""Seconds to wait for a TCP connection; there is no read timeout, as loads can take minutes."""

Tick = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Workload:
    """What every target is sent: the same prompts in the same order."""

    prompts: Sequence[str]
    requests: int
    concurrency: int
    warmup: int

    def prompt(self, index: int) -> str:
        return self.prompts[index % len(self.prompts)]

    def rounds(self, targets: int) -> list[range]:
        """Request indices per round: one round alone, or rounds of `concurrency` when
        targets alternate (A, B, A, B ...), so slow drifts of the machine hit both alike."""
        step = self.requests if targets == 1 else self.concurrency
        return [range(i, min(i + step, self.requests)) for i in range(0, self.requests, step)]


async def run(results: Sequence[Result], workload: Workload, tick: Tick) -> None:
    """Warm every target up, then run the rounds, adding each request's sample to its
    target's Result as it ends (so an interrupted run keeps every request that ended)."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for result in results:
            await _warm(session, result, workload, tick)
        for indices in workload.rounds(len(results)):
            for result in results:
                await _batch(session, result, workload, indices, tick)


async def _warm(
    session: aiohttp.ClientSession, result: Result, workload: Workload, tick: Tick
) -> None:
    # One at a time: the first request loads the model, and the rest should find it loaded.
    for index in range(workload.warmup):
        result.warmup.append(await send(session, result.target, workload.prompt(index)))
        tick()


async def _batch(
    session: aiohttp.ClientSession,
    result: Result,
    workload: Workload,
    indices: range,
    tick: Tick,
) -> None:
    gate = asyncio.Semaphore(workload.concurrency)

    async def one(index: int) -> None:
        async with gate:
            result.samples.append(await send(session, result.target, workload.prompt(index)))
        tick()

    await asyncio.gather(*(one(i) for i in indices))

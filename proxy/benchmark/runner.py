"""The workload: warm-up, then N requests per target at a concurrency, interleaved when compared."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp

from proxy.benchmark.figures import Result
from proxy.benchmark.request import Sample, Target, send

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


async def run(targets: Sequence[Target], workload: Workload, tick: Tick) -> list[Result]:
    """Warm every target up, then run the rounds; one Result per target, in order."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for target in targets:
            await _warm(session, target, workload, tick)
        results = [Result(target, []) for target in targets]
        for indices in workload.rounds(len(targets)):
            for result in results:
                result.samples += await _batch(session, result.target, workload, indices, tick)
    return results


async def _warm(
    session: aiohttp.ClientSession, target: Target, workload: Workload, tick: Tick
) -> None:
    # One at a time: the first request loads the model, and the rest should find it loaded.
    for index in range(workload.warmup):
        await send(session, target, workload.prompt(index))
        tick()


async def _batch(
    session: aiohttp.ClientSession,
    target: Target,
    workload: Workload,
    indices: range,
    tick: Tick,
) -> list[Sample]:
    gate = asyncio.Semaphore(workload.concurrency)

    async def one(index: int) -> Sample:
        async with gate:
            sample = await send(session, target, workload.prompt(index))
        tick()
        return sample

    return list(await asyncio.gather(*(one(i) for i in indices)))

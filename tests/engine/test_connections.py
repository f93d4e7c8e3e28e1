"""Connections to a real engine: a client that leaves stops the generation; keep-alive
connections the engine closes under the proxy cost no client a 502."""

from __future__ import annotations

import asyncio
import time

import openai

from tests.conftest import Proxy
from tests.engine.conftest import MODEL, Engine, openai_client, proxy_metrics, total
from tests.support.metrics import settled

LONG = 400
"""Tokens asked for (with the end-of-sequence token ignored): far more than the test reads."""
DECODES = "llamacpp:n_decode_total"
"""llama_decode() calls: one per generated token while one stream runs."""
HANG = 300.0
"""Seconds after which a generation that never ends is a failure (LONG tokens take far less
even on a loaded 2-core machine)."""


async def test_a_client_that_leaves_stops_the_generation(engine: Engine, tapped: Proxy) -> None:
    """Counted in the engine's own decode steps after the client left (one a token with one
    stream), not in seconds: a loaded machine slows the proxy and the engine alike."""
    client = openai_client(tapped.url)
    async with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to one thousand."}],
        max_tokens=LONG, stream=True, temperature=0, extra_body={"ignore_eos": True},
    ) as response:  # fmt: skip
        lines = response.iter_lines()
        async for line in lines:
            if line.startswith("data: ") and '"content":"' in line:
                break
        assert await engine.metric("llamacpp:requests_processing") == 1
        decodes = await engine.metric(DECODES)
    # Leaving the block closed the client's connection: the engine must stop early. The
    # deadline only ends a hang; a generation that ran on would also end, and fail below.
    deadline = time.monotonic() + HANG
    while await engine.metric("llamacpp:requests_processing") != 0:
        assert time.monotonic() < deadline, f"the engine still generates {HANG:.0f} s later"
        await asyncio.sleep(0.05)
    after = await engine.metric(DECODES) - decodes
    assert after < LONG / 2, f"{after:.0f} tokens generated after the client left"
    await settled(tapped)
    scraped = await proxy_metrics(tapped)
    errors = "ollama_tap_request_errors_total"
    assert total(scraped, errors, kind="client_disconnected") == 1


async def test_many_sequential_streams_meet_no_502(tapped: Proxy) -> None:
    """llama-server closes a connection after a streamed reply without saying so (a plain
    aiohttp client talking to it fails every other request): the proxy's next request on
    such a connection must not become the client's 502."""
    client = openai_client(tapped.url)
    failures: list[str] = []
    for i in range(100):
        try:
            stream = await client.completions.create(
                model=MODEL, prompt=str(i), max_tokens=1, stream=True, temperature=0
            )
            async for _ in stream:
                pass
        except openai.APIError as exc:  # a status, or a connection the proxy cut
            failures.append(f"request {i}: {type(exc).__name__}: {exc}")
    assert failures == [], failures

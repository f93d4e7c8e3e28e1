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


async def test_a_client_that_leaves_stops_the_generation(engine: Engine, tapped: Proxy) -> None:
    client = openai_client(tapped.url)
    predicted = await engine.metric("llamacpp:tokens_predicted_total")
    async with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to one thousand."}],
        max_tokens=LONG, stream=True, temperature=0, extra_body={"ignore_eos": True},
    ) as response:  # fmt: skip
        lines = response.iter_lines()
        async for line in lines:
            if line.startswith("data: ") and '"content":"' in line:
                break
        assert await engine.metric("llamacpp:requests_processing") == 1
        left = time.monotonic()
    # Leaving the block closed the client's connection: the engine must notice within a second.
    while await engine.metric("llamacpp:requests_processing") != 0:
        assert time.monotonic() - left < 1.0, "the engine still generates a second later"
        await asyncio.sleep(0.01)
    generated = await engine.metric("llamacpp:tokens_predicted_total") - predicted
    assert generated < LONG / 2, generated
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

"""`replay serve`: chunk timing as recorded (and scaled), clear misses and refusals."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import ollama
import orjson
import pytest
from structlog.testing import capture_logs

from ollama_tap.recorder.store import Store
from ollama_tap.replay.matching import MatchMode
from tests.conftest import MakeProxy, Proxy
from tests.replay.conftest import StartReplay
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.script import Script
from tests.support.records import records

GENERATE = {"model": "llama3.2", "prompt": "Why is the sky blue?"}


async def _line_offsets(url: str, body: dict[str, Any]) -> list[float]:
    """When each streamed line arrived, in seconds after the request was sent (on a
    connection already open, so that connecting is not counted: recorded offsets start
    when the request head reached the proxy)."""
    offsets: list[float] = []
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/api/version") as resp:
            await resp.read()
        start = time.perf_counter()
        async with s.post(f"{url}/api/generate", json=body) as resp:
            buffer = b""
            async for data in resp.content.iter_any():
                buffer += data
                offsets += [time.perf_counter() - start] * buffer.count(b"\n")
                buffer = buffer[buffer.rfind(b"\n") + 1 :]
    return offsets


async def _sleep_overshoot() -> float:
    """The largest lateness of twenty 10 ms sleeps on this loop."""
    worst = 0.0
    for _ in range(20):
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        worst = max(worst, time.perf_counter() - start - 0.01)
    return worst


@pytest.mark.parametrize("speed", [1.0, 2.0])
async def test_chunks_at_their_recorded_offsets(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay, speed: float
) -> None:
    fake_ollama.script = Script(prefill_delay=0.08, token_delay=0.06)
    await _line_offsets(proxy.url, GENERATE)
    [summary] = await records(proxy, 1)
    record = Store(proxy.settings.db_path).get(summary["id"])
    assert record is not None
    recorded = [at / speed for at in record["timeline"]["offsets"]]
    replay = await replay_of(proxy, 1, speed=speed)
    late = await _sleep_overshoot()
    got = await _line_offsets(replay.url, GENERATE)
    late = max(late, await _sleep_overshoot())
    assert len(got) == len(recorded) + 1  # and the final line
    for want, have in zip([*recorded, record["duration"] / speed], got, strict=True):
        # Never early; late by at most 5 ms or 10 %, plus what this machine's scheduler
        # makes any asyncio.sleep overshoot right now (2 shared cores can be very busy).
        assert -0.002 <= have - want <= max(0.005, 0.1 * want) + late, (want, have, late)


async def test_no_pacing_serves_at_once(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay
) -> None:
    fake_ollama.script = Script(prefill_delay=0.2, token_delay=0.05)
    await _line_offsets(proxy.url, GENERATE)
    replay = await replay_of(proxy, 1, paced=False)
    assert (await _line_offsets(replay.url, GENERATE))[-1] < 0.1


@pytest.mark.parametrize(("loop", "served"), [(False, "one two two"), (True, "one two one")])
async def test_repeats_in_recorded_order_then_the_last_or_cycling(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay, loop: bool, served: str
) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    for tokens in (["one"], ["two"]):
        fake_ollama.script = Script(tokens=tokens)
        await client.generate("llama3.2", "again")
    replay = await replay_of(proxy, 2, loop=loop, paced=False)
    again = ollama.AsyncClient(host=replay.url)
    got = [(await again.generate("llama3.2", "again")).response for _ in range(3)]
    assert " ".join(got) == served


async def test_match_modes(proxy: Proxy, replay_of: StartReplay) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi", keep_alive="5m")
    body = {"model": "llama3.2", "prompt": "hi", "stream": False, "keep_alive": "5m"}
    exact = await replay_of(proxy, 1, MatchMode.EXACT, paced=False, explain=True)
    url = f"{exact.url}/api/generate"
    assert (await _post(url, body))[0] == 200
    status, reply = await _post(url, {**body, "keep_alive": "1h"})
    assert status == 404 and reply["error"].endswith("(keep_alive differs)")
    url = f"{(await replay_of(proxy, 1, MatchMode.NEAREST, paced=False)).url}/api/generate"
    status, reply = await _post(url, {**body, "prompt": "something else"})
    assert (status, reply["response"]) == (200, "The sky is blue.")
    assert (await _post(url.replace("generate", "chat"), body))[0] == 404


async def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as resp:
        return resp.status, orjson.loads(await resp.read())


async def test_a_miss_tells_the_client_only_that_nothing_matched(
    proxy: Proxy, replay_of: StartReplay
) -> None:
    """Without --explain-misses, a 404 is no oracle: the same reply whatever field differs,
    no record id; the operator's log still names the closest and the difference."""
    messages = [{"role": "user", "content": "SECRET-4711"}]
    await ollama.AsyncClient(host=proxy.url).chat("llama3.2", messages=messages)
    [summary] = await records(proxy, 1)
    replay = await replay_of(proxy, 1, paced=False)
    url = f"{replay.url}/api/chat"
    errors = set()
    with capture_logs() as logs:
        for guess in ("SECRET-4712", "other"):
            body = {"model": "llama3.2", "messages": [{"role": "user", "content": guess}]}
            status, reply = await _post(url, {**body, "stream": False})
            assert status == 404
            errors.add(reply["error"])
        phi4 = {"model": "phi4", "messages": messages, "stream": False}
        errors.add((await _post(url, phi4))[1]["error"])
    assert errors == {
        "no recording matches POST /api/chat (the replay server's log names the closest; "
        "--explain-misses says it here)"
    }
    reasons = [e["reason"] for e in logs if e["event"] == "replay_miss"]
    assert len(reasons) == 3
    assert reasons[0].endswith(f"record {summary['id']} (messages[0].content differs)")


async def test_an_explained_miss_names_the_closest_and_the_first_difference(
    proxy: Proxy, replay_of: StartReplay
) -> None:
    messages = [{"role": "user", "content": c} for c in ("a", "b", "c")]
    client = ollama.AsyncClient(host=proxy.url)
    await client.chat("llama3.2", messages=messages)
    [summary] = await records(proxy, 1)
    replay = await replay_of(proxy, 1, paced=False, explain=True)
    url = f"{replay.url}/api/chat"
    status, body = await _post(url, {"model": "phi4", "messages": messages, "stream": False})
    assert status == 404
    assert body["error"].endswith(
        f"the closest is record {summary['id']} (model differs: phi4:latest vs llama3.2:latest)"
    )
    changed = [*messages[:2], {"role": "user", "content": "C"}]
    status, body = await _post(url, {"model": "llama3.2", "messages": changed, "stream": False})
    assert status == 404 and body["error"].endswith("(messages[2].content differs)")
    # keep_alive is volatile: still a hit.
    again = ollama.AsyncClient(host=replay.url)
    assert (await again.chat("llama3.2", messages=messages, keep_alive="1h")).message.content
    status, body = await _post(f"{replay.url}/v1/chat/completions", {"model": "llama3.2"})
    assert status == 404 and body["error"]["type"] == "not_found_error"
    assert "route differs" in body["error"]["message"]
    assert replay.replayer.misses == 3


async def test_metadata_records_are_refused(
    proxy_factory: MakeProxy, replay_of: StartReplay
) -> None:
    proxy = await proxy_factory(record="metadata")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    replay = await replay_of(proxy, 1, paced=False)
    status, body = await _post(f"{replay.url}/api/generate", {**GENERATE, "stream": False})
    assert status == 404
    assert "metadata mode" in body["error"] and "--record full" in body["error"]


async def test_a_foreign_host_is_refused_on_loopback(proxy: Proxy, replay_of: StartReplay) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    replay = await replay_of(proxy, 1, paced=False)
    async with aiohttp.ClientSession() as s:
        for host, status in (("evil.example", 403), ("localhost:11434", 200)):
            async with s.get(f"{replay.url}/api/tags", headers={"Host": host}) as resp:
                assert resp.status == status, host


async def test_a_client_leaving_mid_stream_is_no_error(
    proxy: Proxy, fake_ollama: FakeOllama, replay_of: StartReplay, caplog: pytest.LogCaptureFixture
) -> None:
    fake_ollama.script = Script(token_delay=0.05)
    await _line_offsets(proxy.url, GENERATE)
    replay = await replay_of(proxy, 1)
    for _ in range(2):
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{replay.url}/api/generate", json=GENERATE) as resp:
                await resp.content.readline()  # one line, then away
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)  # past the recording's end: every write would have failed
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    after = await _line_offsets(replay.url, GENERATE)
    assert len(after) == 6


async def test_a_field_left_at_the_clients_default_matches_its_absence(
    proxy: Proxy, replay_of: StartReplay
) -> None:
    # Recorded from a plain HTTP client, asked by the `ollama` package, which adds "tools": [].
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    plain = {"model": "llama3.2", "messages": messages, "stream": False}
    status, recorded = await _post(f"{proxy.url}/api/chat", plain)
    assert status == 200
    replay = await replay_of(proxy, 1, paced=False)
    with capture_logs() as logs:
        reply = await ollama.AsyncClient(host=replay.url).chat("llama3.2", messages=messages)
    assert reply.message.content == recorded["message"]["content"]
    assert replay.replayer.misses == 0
    [said] = [e for e in logs if e["event"] == "replay_normalised"]
    assert said["absent"] == ["tools"]
    # Any field at null, [] or {}, at any depth of an object: `options: {}`, `format: null`.
    status, _ = await _post(f"{replay.url}/api/chat", {**plain, "options": {}, "format": None})
    assert status == 200
    # --match exact still tells them apart.
    exact = await replay_of(proxy, 1, MatchMode.EXACT, paced=False, explain=True)
    status, body = await _post(f"{exact.url}/api/chat", {**plain, "tools": []})
    assert status == 404 and body["error"].endswith("(tools is not in the recording)")

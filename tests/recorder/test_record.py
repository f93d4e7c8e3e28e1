"""One row per exchange in scope: every outcome, every timing, the model's digest."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.exchange import Outcome, Usage
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.store import Filters
from tests.recorder.factory import (
    chat_body,
    drive,
    exchange,
    make_settings,
    native_usage,
    pieces,
    stored,
)

pytestmark = pytest.mark.usefixtures("blockbuster")


@pytest.mark.parametrize("outcome", list(Outcome))
async def test_every_outcome_is_recorded(recorder: Recorder, outcome: Outcome) -> None:
    ex = exchange(body=chat_body(), outcome=outcome)
    drive(recorder, ex, pieces(3))
    await recorder.stop()
    record = await stored(recorder, ex.id)
    assert record["outcome"] == outcome.value
    assert record["chunks"] == 3


async def test_timings_tokens_and_digest(recorder: Recorder) -> None:
    final = {
        "model": "llama3.2",
        "created_at": "2025-06-15T14:13:22.000000Z",
        "done": True,
        "done_reason": "stop",
    }
    ex = exchange(body=chat_body(), final=final, usage=native_usage())
    ex.final_created_at = "2025-06-15T14:13:22.000000Z"
    ex.done_reason = "stop"
    drive(recorder, ex, pieces(3))
    await recorder.stop()
    r = await stored(recorder, ex.id)
    assert (r["model"], r["model_digest"]) == ("llama3.2:latest", "sha256:llama3.2:latest")
    assert r["ttft"] == pytest.approx(0.5)
    assert r["ttfc"] == pytest.approx(0.52)
    assert r["duration"] == pytest.approx(0.55)
    assert (r["load"], r["prefill"], r["decode"], r["total"]) == (0.3, 0.2, 1.0, 2.0)
    assert r["queue_wait"] == pytest.approx(0.5)
    # Ollama's clock: the final object was built at :22.0 after 2 s, so the request
    # reached Ollama at :20.0 and the first chunk (:20.4) came 0.4 s later.
    assert r["server_ttft"] == pytest.approx(0.4)
    assert r["client_overhead"] == pytest.approx(0.1)
    assert (r["prompt_tokens"], r["cached_tokens"], r["eval_tokens"]) == (26, 4, 10)
    assert r["done_reason"] == "stop"
    assert r["output"] == "tok1 tok2 "
    assert r["thinking"] == "tok0 "
    assert r["options"] == {"num_ctx": 8192, "temperature": 0.5}


async def test_queue_wait_is_clamped_at_zero(recorder: Recorder) -> None:
    usage = native_usage()
    usage.total_duration = 1_000_000_000  # less than the phases add up to
    ex = exchange(body=chat_body(), usage=usage, streamed=False)
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    assert r["queue_wait"] == 0.0


async def test_embedding_has_load_and_total_but_no_phases(recorder: Recorder) -> None:
    # An /api/embed reply reports total, load and prompt tokens only (F8): its compute is
    # neither prefill nor decode, and must not be drawn as queue wait.
    usage = Usage(
        total_duration=14_000_000, load_duration=900_000, prompt_eval_count=8, has_timings=True
    )
    final = {"model": "all-minilm", "embeddings": [[0.1, 0.2]]}
    ex = exchange(endpoint="/api/embed", body={"model": "all-minilm", "input": "hi"},
                  final=final, usage=usage, streamed=False)  # fmt: skip
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    assert (r["load"], r["total"]) == (0.0009, 0.014)
    assert (r["queue_wait"], r["prefill"], r["decode"]) == (None, None, None)
    assert r["prompt_tokens"] == 8


async def test_generate_context_and_single_reply(recorder: Recorder) -> None:
    final = {"model": "m", "response": "Hello!", "done": True, "context": [1, 2, 3, 4]}
    ex = exchange(
        endpoint="/api/generate", body={"model": "m", "prompt": "hi"}, final=final, streamed=False
    )
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    assert r["context"] == [1, 2, 3, 4]
    assert r["context_len"] == 4
    assert r["output"] == "Hello!"
    assert "context" not in r["response"]["body"]["json"]
    assert r["timeline"] is None


@pytest.mark.parametrize("record_routes", [False, True])
async def test_polling_routes_only_with_record_routes(tmp_path: Path, record_routes: bool) -> None:
    rec = Recorder(make_settings(tmp_path, record_routes=record_routes), CollectorRegistry())
    await rec.start()
    ex = exchange(endpoint="/api/tags", method="GET", body=None, streamed=False)
    drive(rec, ex)
    await rec.stop()
    assert (await asyncio.to_thread(rec.store.get, ex.id) is not None) is record_routes


async def test_management_routes_are_metadata_only(recorder: Recorder) -> None:
    ex = exchange(endpoint="/api/pull", body={"model": "llama3.2"}, final={"status": "success"})
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    assert "body" not in r["request"]
    assert "body" not in r["response"]
    assert r["timeline"] is None
    assert r["model"] == "llama3.2:latest"


async def test_off_mode_does_nothing(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, record="off")
    rec = Recorder(settings, CollectorRegistry())
    await rec.start()
    ex = exchange(body=chat_body())
    drive(rec, ex, pieces(2))
    await rec.stop()
    assert "recorder" not in ex.metadata
    assert not settings.db_path.exists()
    assert await asyncio.to_thread(rec.store.page, Filters()) == ([], None)

"""The load tracker's rules one by one (L0–L7, docs/diagnoses.md), on hand-built exchanges and
/api/ps snapshots: what the scripted day does not reach."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ollama_tap.exchange import Outcome
from ollama_tap.facts import LoadRole
from tests.loads.rig import A, B, Rig


def test_concurrent_cold_requests_are_one_load_triggered_by_the_earliest(rig: Rig) -> None:
    now = time.monotonic()
    first = rig.start(A, client="10.0.0.1", at=now)
    second = rig.start(A, client="10.0.0.2", at=now + 0.2)
    rig.end(second, 1.3)  # the later one's reply comes first
    rig.end(first, 1.5)
    [event] = rig.tracker.events
    assert (event.request, event.address, event.waited) == (first.id, "10.0.0.1", [second.id])
    assert event.load_duration == 1.5
    assert rig.value("model_loads_total", model=A, cause="first_load") == 1
    assert first.load_event is not None and second.load_event is not None
    assert (first.load_event.role, second.load_event.role) == (LoadRole.TRIGGER, LoadRole.WAITED)
    assert first.load_event.event == event.as_json()


def test_a_warm_reply_is_no_load_and_a_later_cold_one_is_a_new_load(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.end(rig.start(A), 0.002)
    assert len(rig.tracker.events) == 1
    # Unloaded behind the proxy's back (another client, not through it): unknown.
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load"), (A, "unknown")]


def test_a_slow_reply_on_the_runner_it_found_is_no_load(rig: Rig) -> None:
    """Ollama's `load_duration` includes its handler's reads of the model before the
    scheduler reuses the runner (L0 d): over a second on a loaded machine, and no load."""
    ctx = {"num_ctx": 4096}
    rig.end(rig.start(A, options=ctx), 2.0)
    rig.ps({A: 4096})
    slow = rig.start(A, options=ctx)
    rig.end(slow, 1.1)
    assert rig.causes() == [(A, "first_load")] and slow.load_event is None
    # Other options than the runner's: Ollama reloads it.
    rig.end(rig.start(A, options={"num_ctx": 8192}), 1.1)
    assert rig.causes()[-1] == (A, "options_changed")


def test_a_slow_reply_is_a_load_when_the_runner_may_differ() -> None:
    """Options the proxy did not see (a runner resident before it started, a Modelfile
    variant on the same blob) or a runner that failed: the long reply is a load."""
    rig = Rig()
    rig.ps({A: 4096})  # resident before the proxy started: its options unknown
    rig.end(rig.start(A, options={"num_ctx": 4096}), 1.1)
    assert rig.causes() == [(A, "unknown")]
    rig.ps({A: 4096})
    rig.end(rig.start(A, options={"num_ctx": 4096}), 0.01, error="model runner has "
            "unexpectedly stopped", outcome=Outcome.STREAM_ERROR)  # fmt: skip
    rig.end(rig.start(A, options={"num_ctx": 4096}), 1.1)
    assert rig.causes()[-1] == (A, "runner_died")
    rig.ps({A: 4096})
    # Re-created from the same weights with other Modelfile parameters: the blob's runner,
    # another manifest.
    up: Any = rig.tracker.upstream
    up.digest_of = lambda model: "d-a2"
    up.runner_key = lambda digest: "d-a"
    rig.end(rig.start(A, options={"num_ctx": 4096}), 1.1)
    assert rig.causes()[-1] == (A, "unknown")


def test_after_an_out_of_memory_error_every_runner_is_flushed(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.end(rig.start(B), 2.0)
    rig.ps({A: 4096, B: 4096})
    rig.end(
        rig.start(A), 0.01, error="cudaMalloc failed: out of memory", outcome=Outcome.UPSTREAM_ERROR
    )
    rig.ps({})
    rig.end(rig.start(B), 2.0)
    rig.end(rig.start(A), 2.0)
    assert rig.causes()[2:] == [(B, "oom_flush"), (A, "oom_flush")]


def test_a_runner_that_died_is_reloaded_with_the_same_options(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.end(rig.start(A), 0.01, error="model runner has unexpectedly stopped, this may be due "
            "to resource limitations", outcome=Outcome.STREAM_ERROR)  # fmt: skip
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load"), (A, "runner_died")]


def test_models_gone_when_ollama_comes_back_went_with_a_restart(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.ps(None)
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load"), (A, "restart")]


def test_keep_alive_expiry_is_told_from_expires_at(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096}, expires_in=-5.0)  # idle, its keep_alive over; the next read misses it
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load"), (A, "expired")]


def test_an_eviction_names_the_evicting_model(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.end(rig.start(B), 2.0)
    rig.ps({B: 4096})
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load"), (B, "first_load"), (A, "evicted")]
    assert rig.tracker.events[1].evicted == [A]
    assert rig.tracker.events[2].detail == f"evicted by {B}"
    assert rig.value("model_evictions_total", model=A, by=B) == 1


def test_an_unload_reply_for_a_model_not_loaded_is_no_departure(rig: Rig) -> None:
    rig.end(rig.start(A, keep_alive=0), 0.0, done_reason="unload")
    rig.end(rig.start(A), 2.0)
    assert rig.causes() == [(A, "first_load")]


@pytest.mark.parametrize(
    ("loader", "request_options", "predicted"),
    [
        ({"num_ctx": 8192}, {}, ["num_ctx 8192 → auto"]),
        ({}, {}, []),
        ({}, {"num_ctx": 4096}, []),  # the auto runner has 4096 (per /api/ps)
        ({}, {"num_ctx": 8192}, ["num_ctx 4096 → 8192"]),
        ({"num_ctx": 200000}, {"num_ctx": 131072}, []),  # both capped at the training context
        ({}, {"num_gpu": -1, "temperature": 0.2, "num_keep": 10}, []),
        ({}, {"num_gpu": 20}, ["num_gpu auto → 20"]),
        ({"use_mmap": False}, {}, ["use_mmap false → auto"]),
        # An automatic runner may have chosen 1024 itself (`automaticGenerationBatch`):
        # listed, not predicted; 1000 it never chooses.
        ({}, {"num_batch": 1024, "num_thread": 0}, ["num_batch auto → 1024"]),
        ({}, {"num_batch": 1000}, ["num_batch auto → 1000"]),
        ({"num_batch": 512}, {}, []),  # an unset request compares as 512 (DefaultOptions)
    ],
)
def test_the_reload_prediction(
    rig: Rig, loader: dict[str, Any], request_options: dict[str, Any], predicted: list[str]
) -> None:
    rig.end(rig.start(A, options=loader), 2.0)
    ctx = min(loader.get("num_ctx", 4096), 131072)
    rig.ps({A: ctx})
    ex = rig.start(A, options=request_options)
    assert [c.text for c in ex.metadata["loads"].changes] == predicted
    for change in ex.metadata["loads"].changes:
        counted = rig.value("reload_predicted_total", model=A, field=change.field)
        assert counted == (1 if change.certain else None)


@pytest.mark.parametrize(
    ("version", "predicted"), [("0.33.0", ["shift true → false"]), ("0.24.0", [])]
)
def test_shift_reloads_from_v0_30(version: str, predicted: list[str]) -> None:
    rig = Rig(version)
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    ex = rig.start(A, body={"shift": False})
    assert [c.text for c in ex.metadata["loads"].changes] == predicted


def test_cloud_models_are_left_out(rig: Rig) -> None:
    ex = rig.start("gpt-oss:120b-cloud")
    rig.end(ex, 3.0)
    assert list(rig.tracker.events) == []
    assert ex.load_event is None


def test_requests_for_models_never_loaded_leave_nothing_behind(rig: Rig) -> None:
    for n in range(100):
        rig.end(rig.start(f"typo-{n}"), 0.0, outcome=Outcome.UPSTREAM_ERROR)
    assert rig.tracker._runners == {}


def test_a_request_that_arrives_during_a_reload_waits_for_it(rig: Rig) -> None:
    rig.end(rig.start(A, options={"num_ctx": 4096}), 2.0)
    rig.ps({A: 4096})
    now = rig.clock
    reload = rig.start(A, options={"num_ctx": 8192}, at=now)
    rig.ps({})  # the old runner went; the new one is loading
    behind = rig.start(A, options={"num_ctx": 8192}, at=now + 0.3)
    rig.end(behind, 1.2)
    rig.end(reload, 1.3)
    assert rig.causes() == [(A, "first_load"), (A, "options_changed")]
    event = rig.tracker.events[1]
    assert (event.request, event.waited, event.detail) == (
        reload.id,
        [behind.id],
        "num_ctx 4096 → 8192",
    )


def test_a_sub_second_load_is_triggered_by_the_request_that_ended_before_the_read(
    rig: Rig,
) -> None:
    """A load under a second shows in no reply: the next /api/ps read lists the runner after
    its request ended, and that request is still its trigger, with its client."""
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.end(rig.start(A, keep_alive=0, client="10.0.0.3"))
    rig.ps({})
    dave = rig.start(A, client="10.0.0.4")
    rig.end(dave, 0.2)
    rig.ps({A: 4096})
    event = rig.tracker.events[-1]
    assert (str(event.cause), event.request, event.address) == ("unloaded", dave.id, "10.0.0.4")
    assert event.departure is not None and event.departure.by_request is not None

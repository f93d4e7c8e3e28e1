"""The load causes against Ollama's scheduler where ollama-fidelity.md §1 found the tracker
wrong (the numbers are that table's): each test failed before its fix."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from ollama_tap.exchange import Outcome, RequestFields
from ollama_tap.facts import ModelFacts
from ollama_tap.ollama.state import LoadedModel
from tests.loads.rig import A, B, Rig, Upstream
from tests.support.exchanges import new_exchange


@pytest.fixture
def rig() -> Rig:
    r = Rig()
    r.ps({})
    return r


def start_v1(rig: Rig, model: str, body: dict[str, Any]) -> Any:
    """A /v1/chat/completions request, its body parsed as the proxy parses any body."""
    ex = new_exchange("/v1/chat/completions")
    ex.request = RequestFields(
        model=model, options=body.get("options"), keep_alive=body.get("keep_alive"), parsed=True
    )
    ex.request_body = orjson.dumps({"model": model, **body})
    ex.started = rig.clock
    rig.tracker.request(ex)
    return ex


def test_4_v1_options_and_keep_alive_are_not_the_runners(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    ex = start_v1(rig, A, {"options": {"num_ctx": 1024}, "keep_alive": 0, "shift": False})
    assert ex.metadata["loads"].changes == [], "Ollama ignores them: no reload to predict"
    rig.end(ex)
    assert rig.value("reload_predicted_total", model=A, field="num_ctx") is None
    rig.ps({A: 4096})
    assert rig.causes() == [(A, "first_load")], "not unloaded, so no phantom load"


def test_6_a_busy_runners_past_expiry_is_not_an_expiry(rig: Rig) -> None:
    """`useLoadedRunner` leaves a busy runner's `expiresAt` at its last idle value: a row
    read while a request ran may show a past expiry without the runner going anywhere."""
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    busy = rig.start(A)
    rig.ps({A: 4096}, expires_in=-5.0)  # read while busy: stale
    rig.end(busy)
    rig.end(rig.start(A))  # not "expired" at its arrival
    rig.ps({A: 4096})
    assert rig.causes() == [(A, "first_load")]
    # Evicted after such a row: evicted, not expired.
    busy = rig.start(A)
    rig.ps({A: 4096}, expires_in=-5.0)
    rig.end(busy)
    rig.end(rig.start(B), 2.0)
    rig.ps({B: 4096})
    rig.end(rig.start(A), 2.0)
    assert rig.causes()[-1] == (A, "evicted")


def test_9_a_vision_models_floor_is_no_change(rig: Rig) -> None:
    class Vision(Upstream):
        def model_facts(self, model: str | None) -> ModelFacts:
            return ModelFacts("mllama", 131072, True, None)

    rig.tracker.upstream = Vision()
    rig.end(rig.start(A, options={"num_ctx": 1024}), 2.0)
    rig.ps({A: 2048})  # getRunner raised it to 2048
    ex = rig.start(A, options={"num_ctx": 2000})
    assert ex.metadata["loads"].changes == []


@pytest.mark.parametrize(
    ("loader", "request_options", "certain"),
    [
        ({"use_mmap": False}, {}, True),  # an explicit runner against an unset request
        ({}, {"use_mmap": True}, False),  # the automatic runner may have chosen true
        ({}, {"draft_num_predict": 4}, False),  # the default of a model with a draft
        ({"draft_num_predict": 4}, {"draft_num_predict": 6}, True),
    ],
)
def test_10_what_needs_reload_may_find_equal_is_not_predicted(
    rig: Rig, loader: dict[str, Any], request_options: dict[str, Any], certain: bool
) -> None:
    rig.end(rig.start(A, options=loader), 2.0)
    rig.ps({A: 4096})
    ex = rig.start(A, options=request_options)
    [change] = ex.metadata["loads"].changes
    assert change.certain is certain
    counted = rig.value("reload_predicted_total", model=A, field=change.field)
    assert counted == (1 if certain else None)
    rig.end(ex, 2.0)
    assert rig.causes()[-1] == (A, "options_changed"), "the cause when a load does follow"


@pytest.mark.parametrize(
    ("error", "version", "flushed"),
    [
        ("vk_error_out_of_device_memory", "0.33.0", True),
        ("hipMalloc failed: out of device memory", "0.30.0", True),
        ("ErrorOutOfMemory", "0.33.0", True),
        ("unable to allocate backend buffer", "0.33.0", False),  # not Ollama's
        ("cudaMalloc failed: out of memory", "0.24.0", False),  # no runtime flush yet
    ],
)
def test_12_ollamas_own_out_of_memory_texts_and_their_version(
    error: str, version: str, flushed: bool
) -> None:
    rig = Rig(version)
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    rig.end(rig.start(B), 2.0)
    rig.ps({A: 4096, B: 4096})
    rig.end(rig.start(A), 0.01, error=error, outcome=Outcome.UPSTREAM_ERROR)
    rig.ps({})
    rig.end(rig.start(B), 2.0)
    assert (rig.causes()[-1] == (B, "oom_flush")) is flushed


def test_15_keep_alive_zero_waits_for_the_requests_in_flight(rig: Rig) -> None:
    """Ollama unloads at refCount 0 only: a runner still busy past the unloading window is
    still the same runner, not a new load."""
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    busy = rig.start(A)
    rig.end(rig.start(A, keep_alive=0))
    for runner in rig.tracker._runners.values():
        runner.unloading_until = 0.0  # the window has passed
    rig.ps({A: 4096})
    assert rig.causes() == [(A, "first_load")]
    # A later request carrying keep_alive overwrites the 0.
    rig.end(rig.start(A, keep_alive="5m"))
    rig.end(busy)
    rig.ps({A: 4096})
    assert rig.causes() == [(A, "first_load")]
    # Nor does one that arrives while the keep_alive 0 request still runs.
    busy, zero = rig.start(A), rig.start(A, keep_alive=0)
    rig.end(rig.start(A, keep_alive="5m"))
    rig.end(zero)
    rig.end(busy)
    rig.ps({A: 4096})
    assert rig.causes() == [(A, "first_load")]
    # Without one, the unload happens when the last request ends.
    busy = rig.start(A)
    rig.end(rig.start(A, keep_alive=0))
    rig.end(busy)
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    assert rig.causes()[-1] == (A, "unloaded")


def test_17_another_context_length_in_ps_is_a_load(rig: Rig) -> None:
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.ps({A: 8192})  # replaced by a client that bypasses the proxy
    assert rig.causes() == [(A, "first_load"), (A, "unknown")]
    assert rig.tracker.events[-1].source == "ps"
    assert rig.tracker.events[-1].context_length == 8192


def test_a_smaller_automatic_context_after_a_load_is_counted(rig: Rig) -> None:
    """From v0.30.0 a load that runs out of memory retries a smaller automatic context:
    /api/ps shows less with no client change. The load keeps its cause."""
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 32768})
    rig.ps({})
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    event = rig.tracker.events[-1]
    assert (str(event.cause), event.reduced_from, event.context_length) == ("unknown", 32768, 4096)
    assert event.detail == "context reduced 32768 → 4096 (did not fit memory)"
    assert rig.value("context_reduced_total", model=A) == 1
    # An explicit num_ctx that is smaller is the client's choice, not a reduction.
    rig.end(rig.start(A, options={"num_ctx": 2048}), 2.0)
    rig.ps({A: 2048})
    assert rig.tracker.events[-1].reduced_from is None
    assert rig.value("context_reduced_total", model=A) == 1
    # /api/ps listing a smaller context while a request without num_ctx waits: the same.
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 32768})
    waiting = rig.start(A)
    rig.ps({A: 4096})
    assert rig.tracker.events[-1].reduced_from == 32768
    assert rig.value("context_reduced_total", model=A) == 2
    rig.end(waiting)
    # With no request of the proxy's, whoever reloaded it may have set num_ctx: not told.
    rig.ps({A: 2048})
    assert rig.tracker.events[-1].reduced_from is None


def test_16_names_on_one_blob_are_one_runner(rig: Rig) -> None:
    """Ollama keys runners by the weights' blob: a Modelfile variant of A (its own manifest
    digest, A's blob) that sets another num_ctx replaces A's runner, and /api/ps lists it
    under the variant's name. Not an eviction of A and a first load of the variant."""
    v = "variant:latest"

    class Variants(Upstream):
        def digest_of(self, model: str | None) -> str | None:
            return "d-v" if model in (v, "variant") else super().digest_of(model)

        def runner_key(self, digest: str | None) -> str | None:
            return {"d-v": "d-a"}.get(digest or "", digest)

    rig.tracker.upstream = Variants()
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    rig.end(rig.start(v), 2.0)  # its Modelfile's num_ctx 8192 reloads the blob's runner
    row = LoadedModel(v, "d-v", 1, 1, 8192, v, time.time() + 300)
    rig.tracker.ps({v: row})
    assert [cause for _, cause in rig.causes()] == ["first_load", "unknown"]
    assert rig.tracker.events[-1].context_length == 8192
    assert rig.value("model_evictions_total", model=A, by=v) is None


def test_a_row_another_request_reloaded_is_not_the_waiting_requests_load(rig: Rig) -> None:
    """A sub-second reload shows in no reply: a num_ctx 2048 request replaces the automatic
    4096 runner and ends, then a request without num_ctx (back to 4096: Ollama reloads
    again) waits while /api/ps lists the 2048 runner. That row is not its load: an automatic
    context shrinks only to 32768 or 4096 (`nextLowerAutoNumCtx`, server/sched.go at
    v0.30.0), so it is no reduction, and the waiting request's context is not that row's."""
    rig.end(rig.start(A), 2.0)
    rig.ps({A: 4096})
    reloader = rig.start(A, options={"num_ctx": 2048}, client="10.0.0.7")
    rig.end(reloader, 0.05)
    waiting = rig.start(A)
    rig.ps({A: 2048})
    event = rig.tracker.events[-1]
    assert (event.request, event.address, str(event.cause)) == (
        reloader.id, "10.0.0.7", "options_changed",
    )  # fmt: skip
    assert (event.reduced_from, event.context_length) == (None, 2048)
    assert rig.value("context_reduced_total", model=A) == 0
    assert rig.tracker.stale_row(waiting)
    rig.end(waiting)
    # Its own reload lists the automatic context again: a load, and the row to trust.
    rig.ps({A: 4096})
    assert rig.tracker.events[-1].context_length == 4096
    after = rig.start(A)
    assert not rig.tracker.stale_row(after)


def test_an_explicit_request_waiting_is_not_the_loader_of_another_context(rig: Rig) -> None:
    """The same with an explicit num_ctx: a row whose context differs from the one the
    waiting request asks for was loaded by someone else, and its options are unknown."""
    rig.end(rig.start(A, options={"num_ctx": 8192}), 2.0)
    rig.ps({A: 8192})
    waiting = rig.start(A, options={"num_ctx": 8192})
    rig.ps({A: 2048})
    assert rig.tracker.events[-1].request is None
    assert rig.tracker.stale_row(waiting)


def test_a_row_a_request_that_ended_asked_for_is_its_reload(rig: Rig) -> None:
    """While no automatic context was seen, a request without num_ctx could be listed with
    any: a row with the num_ctx a request that ended since the last read asked for is that
    request's reload (no reply showed it: it is the trigger), not the waiting one's, nor
    the load a reply showed before it."""
    rig.ps({A: 4096})  # resident before the proxy started: its options unknown
    rig.ps({A: 4096})
    reloader = rig.start(A, options={"num_ctx": 2048})
    rig.end(reloader, 0.05)
    waiting = rig.start(A)
    rig.ps({A: 2048})
    assert rig.tracker.events[-1].request == reloader.id
    assert rig.tracker.stale_row(waiting)
    rig.end(waiting, 2.0)  # its own reload, which the reply shows
    rig.end(rig.start(A, options={"num_ctx": 3072}), 0.05)
    rig.ps({A: 3072})
    assert rig.tracker.events[-1].context_length is None
    assert rig.tracker.stale_row(rig.start(A))


def test_16_a_variant_that_sets_other_parameters_runs_on_its_originals_runner(rig: Rig) -> None:
    """A Modelfile variant (`FROM` the model, `PARAMETER temperature`): another manifest,
    the same weights and no other runner option, so Ollama serves it on the running runner
    and its slow reply (the handler reading the model) is no load (L0 d). A variant whose
    Modelfile sets num_ctx asks for that context: a reload, foreseen."""
    v, sized = "variant:latest", "sized:latest"
    hidden = "FROM /models/blobs/sha256-" + "a" * 64

    class Variants(Upstream):
        def digest_of(self, model: str | None) -> str | None:
            names = {v: "d-v", "variant": "d-v", sized: "d-s", "sized": "d-s"}
            return names.get(model or "") or super().digest_of(model)

        def runner_key(self, digest: str | None) -> str | None:
            return {"d-v": "d-a", "d-s": "d-a"}.get(digest or "", digest)

        def model_facts(self, model: str | None) -> ModelFacts:
            params = (("num_ctx", 8192),) if model in (sized, "sized") else ()
            return ModelFacts("llama", 131072, False, None, params, hidden)

    rig.tracker.upstream = Variants()
    rig.end(rig.start(A, options={"num_ctx": 4096}), 2.0)
    rig.ps({A: 4096})
    slow = rig.start(v, options={"num_ctx": 4096})
    rig.end(slow, 1.4)
    assert rig.causes() == [(A, "first_load")] and slow.load_event is None
    grown = rig.start(sized)
    assert [c.text for c in grown.metadata["loads"].changes] == ["num_ctx 4096 → 8192"]
    rig.end(grown, 1.4)
    event = rig.tracker.events[-1]  # named after the blob's runner, as /api/ps lists it
    assert (str(event.cause), event.request) == ("options_changed", grown.id)

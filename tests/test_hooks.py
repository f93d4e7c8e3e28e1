"""Hook dispatch: `chunks` takers get a read's pieces at once, `chunk` takers one by one,
a failing observer costs only its own call, and observers run phase by phase."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.attribution import ClientNames
from ollama_tap.exchange import Exchange, Outcome, OutputChunk, OutputKind
from ollama_tap.facts import TruncationKind, Verdict
from ollama_tap.hooks import Hooks, Phase, observer_name
from ollama_tap.metrics.observer import MetricsObserver
from ollama_tap.names import ModelLabels
from ollama_tap.truncation.observer import TruncationObserver
from tests.support.exchanges import new_exchange


def pieces(n: int, at: float = 1.0) -> list[OutputChunk]:
    return [OutputChunk(at, OutputKind.CONTENT, f"t{i}", 10) for i in range(n)]


class PerPiece:
    name = "per-piece"

    def __init__(self, fail_on: str | None = None) -> None:
        self.seen: list[str] = []
        self.fail_on = fail_on

    def chunk(self, ex: Exchange, piece: OutputChunk) -> None:
        if piece.text == self.fail_on:
            raise RuntimeError("observer bug")
        self.seen.append(piece.text)


class Batched:
    name = "batched"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def chunk(self, ex: Exchange, piece: OutputChunk) -> None:  # never called: chunks wins
        raise AssertionError("chunk called on an observer that has chunks")

    def chunks(self, ex: Exchange, batch: Any) -> None:
        self.calls.append([p.text for p in batch])


def test_batch_and_piece_takers_see_the_same_pieces_in_order() -> None:
    per, batched = PerPiece(), Batched()
    hooks = Hooks([per, batched], CollectorRegistry())
    assert hooks.wants_chunks
    hooks.chunks(new_exchange(), pieces(3))
    hooks.chunks(new_exchange(), pieces(1))
    assert per.seen == ["t0", "t1", "t2", "t0"]
    assert batched.calls == [["t0", "t1", "t2"], ["t0"]]


def test_a_failing_piece_is_counted_and_only_it_is_skipped() -> None:
    registry = CollectorRegistry()
    failing, batched = PerPiece(fail_on="t1"), Batched()
    hooks = Hooks([failing, batched], registry)
    hooks.chunks(new_exchange(), pieces(3))
    assert failing.seen == ["t0", "t2"]
    assert batched.calls == [["t0", "t1", "t2"]]
    errors = {"observer": "per-piece", "hook": "chunk"}
    assert registry.get_sample_value("ollama_tap_observer_errors_total", errors) == 1


def test_no_chunk_takers_means_no_parsing_is_asked_for() -> None:
    class OnlyEnds:
        def response(self, ex: Exchange) -> None: ...

    assert not Hooks([OnlyEnds()], CollectorRegistry()).wants_chunks


def test_note_outputs_equals_note_output_piece_by_piece() -> None:
    batch = [
        OutputChunk(1.0, OutputKind.THINKING, "hm", 5),
        OutputChunk(1.0, OutputKind.THINKING, "m", 5),
        OutputChunk(1.0, OutputKind.CONTENT, "A", 5),
        OutputChunk(1.0, OutputKind.CONTENT, "B", 5),
    ]
    one, each = new_exchange(), new_exchange()
    one.note_outputs(batch[:2])
    one.note_outputs([OutputChunk(2.0, p.kind, p.text, p.nbytes) for p in batch[2:]])
    for piece in batch[:2]:
        each.note_outputs((piece,))
    for piece in batch[2:]:
        each.note_outputs((OutputChunk(2.0, piece.kind, piece.text, piece.nbytes),))
    fields = ("first_output", "first_content", "last_output", "output_events")
    assert [getattr(one, f) for f in fields] == [getattr(each, f) for f in fields]
    assert (one.first_output, one.first_content, one.output_events) == (1.0, 2.0, 4)


def test_metrics_gaps_are_the_same_batched_or_one_by_one() -> None:
    times = [0.10, 0.10, 0.10, 0.25, 0.31, 0.31, 0.90]
    reads = [[0.10, 0.10, 0.10], [0.25], [0.31, 0.31], [0.90]]
    registries = []
    for batched in (False, True):
        registry = CollectorRegistry()
        observer = MetricsObserver(registry, ModelLabels(10))
        ex = new_exchange()
        observer.request(ex)
        if batched:
            for read in reads:
                observer.chunks(ex, [OutputChunk(t, OutputKind.CONTENT, "x", 1) for t in read])
        else:
            for t in times:
                observer.chunks(ex, [OutputChunk(t, OutputKind.CONTENT, "x", 1)])
        registries.append(registry)
    name = "ollama_tap_inter_token_latency_seconds"
    labels = {"endpoint": "/api/generate", "model": ""}
    for suffix, le in (("_count", None), ("_sum", None), ("_bucket", "0.005"), ("_bucket", "0.1")):
        want = {**labels, "le": le} if le else labels
        values = [r.get_sample_value(name + suffix, want) for r in registries]
        assert values[0] == values[1] and values[0] is not None, (suffix, le, values)
    assert registries[1].get_sample_value(name + "_count", labels) == len(times) - 1


class Logged:
    """Writes its name to a shared log at every hook, in the phase it is given."""

    def __init__(self, name: str, log: list[str], phase: Phase | None = None) -> None:
        self.name, self.log = name, log
        if phase is not None:
            self.phase = phase

    def request(self, ex: Exchange) -> None:
        self.log.append(self.name)

    def chunks(self, ex: Exchange, batch: Any) -> None:
        self.log.append(self.name)

    def response(self, ex: Exchange) -> None:
        self.log.append(self.name)


def test_observers_run_phase_by_phase_and_in_the_given_order_within_one() -> None:
    log: list[str] = []
    given = [
        Logged("sink-undeclared", log),
        Logged("sink", log, Phase.SINK),
        Logged("analysis-1", log, Phase.ANALYSIS),
        Logged("names", log, Phase.NAMES),
        Logged("analysis-2", log, Phase.ANALYSIS),
    ]
    hooks = Hooks(given, CollectorRegistry())
    order = ["names", "analysis-1", "analysis-2", "sink-undeclared", "sink"]
    assert [observer_name(o) for o in hooks.observers] == order
    ex = new_exchange(outcome=Outcome.OK)
    for fire in (hooks.request, lambda ex: hooks.chunks(ex, pieces(2)), hooks.end):
        log.clear()
        fire(ex)
        assert log == order


def test_a_sink_reads_the_facts_the_analysers_left_whatever_the_list_order() -> None:
    seen: list[object] = []

    class Sink:
        name = "sink"

        def request(self, ex: Exchange) -> None:
            seen.append(ex.client_name)

        def response(self, ex: Exchange) -> None:
            seen.append(ex.truncation)

    registry = CollectorRegistry()
    labels = ModelLabels(10)
    truncation = TruncationObserver(registry, labels)
    hooks = Hooks([Sink(), truncation, ClientNames(10)], registry)
    ex = new_exchange(
        "/api/chat", status=400, outcome=Outcome.UPSTREAM_ERROR,
        error_message="input length (7912 tokens) exceeds the model's maximum context length "
        "(4096 tokens)", request_headers={"User-Agent": "curl/8.5"},
    )  # fmt: skip
    hooks.request(ex)
    hooks.end(ex)
    [name, verdict] = seen
    assert name == "curl"
    assert isinstance(verdict, Verdict) and verdict.kind is TruncationKind.REFUSED


def test_a_phase_that_is_not_a_phase_is_refused_at_start() -> None:
    class Confused:
        name = "confused"
        phase = 2

    with pytest.raises(TypeError, match=r"observer confused: `phase` must be a hooks\.Phase"):
        Hooks([Confused()], CollectorRegistry())

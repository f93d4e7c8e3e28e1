"""`models inspect`'s progress bar: drawn by the CLI, fed by the store's `watch`."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from ollama_tap.cli import main, models
from ollama_tap.tokens.store import Advance, Inspection, ModelStore, Watch, inspect, unwatched
from tests.tokens.synth import add_model, gguf_bytes, vocab_kv


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    add_model(tmp_path, "tiny:latest", gguf_bytes(vocab_kv("llama", ["<unk>", "a"], [2, 1])))
    return ModelStore(tmp_path)


def test_inspect_watches_every_blob_it_verifies(store: ModelStore) -> None:
    seen: dict[str, list[int]] = {}

    @contextmanager
    def watch(path: Path, size: int) -> Iterator[Advance]:
        seen[path.name] = [size]
        yield seen[path.name].append

    found = inspect(store, "tiny", watch=watch)
    assert sorted(seen) == sorted(path.name for path in found.blobs)
    assert all(size == sum(chunks) for size, *chunks in seen.values())
    seen.clear()
    inspect(store, "tiny", verify=False, watch=watch)
    assert seen == {}


def test_the_bar_is_drawn_for_large_blobs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(
        models, "Console", lambda **_: Console(file=screen, force_terminal=True, width=80)
    )
    blob = Path("sha256-" + "a" * 64)
    with models._bar(blob, models.PROGRESS_MIN_BYTES - 1) as advance:
        advance(models.PROGRESS_MIN_BYTES - 1)
    assert screen.getvalue() == ""
    with models._bar(blob, models.PROGRESS_MIN_BYTES) as advance:
        advance(models.PROGRESS_MIN_BYTES)
    drawn = screen.getvalue()
    assert "verify sha256-aaaaaaaaaaaa " in drawn and "67.1/67.1 MB" in drawn
    assert drawn.endswith("\x1b[2K")  # transient: the bar is erased when the blob is done


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stderr", "watch"), [(Tty(), models._bar), (io.StringIO(), unwatched)])
def test_the_bar_only_on_a_terminal(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO, watch: Watch
) -> None:
    given: list[Watch] = []

    def spy(store: ModelStore, name: str, verify: bool, watch: Watch) -> Inspection:
        given.append(watch)
        return inspect(store, name, verify, watch)

    monkeypatch.setattr(models, "inspect", spy)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["models", "inspect", "tiny", "--store", str(store.root), "--json"]) == 0
    assert given == [watch]

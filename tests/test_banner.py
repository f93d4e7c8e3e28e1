"""What `ollama-tap serve` prints first."""

from __future__ import annotations

import copy
import importlib.machinery
import pickle

from ollama_tap import compiled
from ollama_tap.config import Settings
from ollama_tap.exchange import OutputChunk, OutputKind
from ollama_tap.relay import tap
from ollama_tap.serve import banner
from tests.support.serve_process import ADMIN_TOKEN


def test_the_banner_says_whether_the_hot_modules_are_compiled() -> None:
    """An install without a C compiler runs interpreted; pip hides the build's word on it,
    so `serve` says it."""
    text = banner(Settings(upstream="http://127.0.0.1:11434", admin_token=ADMIN_TOKEN), ADMIN_TOKEN)
    # What the import system really loaded: an extension module, or the .py.
    really = isinstance(tap.__loader__, importlib.machinery.ExtensionFileLoader)
    assert compiled.active() is really
    build = text.splitlines()[-1].split()
    assert build[:2] == ["build:", "compiled" if really else "interpreted"]


def test_an_output_chunk_copies_and_pickles() -> None:
    """The `chunk` hook's argument, compiled or not: observers may keep or send it on."""
    piece = OutputChunk(1.5, OutputKind.CONTENT, "hi", 7)
    assert copy.copy(piece) == copy.deepcopy(piece) == pickle.loads(pickle.dumps(piece)) == piece


def test_the_banner_names_no_database_when_recording_is_off() -> None:
    settings = Settings(upstream="http://127.0.0.1:11434", admin_token=ADMIN_TOKEN, record="off")
    text = banner(settings, ADMIN_TOKEN)
    [recording] = [line.strip() for line in text.splitlines() if "recording" in line]
    assert recording == "recording: off (nothing is kept; --record full or metadata to record)"
    assert str(settings.db_path) not in text


def test_the_banner_says_when_the_reload_guard_changes_bodies() -> None:
    base = {"upstream": "http://127.0.0.1:11434", "admin_token": ADMIN_TOKEN}
    assert "reload guard" not in banner(Settings(**base), ADMIN_TOKEN)
    text = banner(Settings(**base, reload_guard=True), ADMIN_TOKEN)
    [line] = [line.strip() for line in text.splitlines() if "reload guard" in line]
    assert line.startswith("reload guard: on") and "docs/transparency.md" in line

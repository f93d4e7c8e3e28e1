"""A fake Ollama server for tests: Ollama's wire protocol, with scripted output and no model.

It answers Ollama's routes the way Ollama's server does on the wire, built from Ollama's
documentation and server code (not from this proxy, and without running Ollama): Go's
`json.Marshal` byte layout, headers held back until the first chunk, each route family's
error shapes, and the compatibility layers under `/v1` (OpenAI chat and text completions,
embeddings, models and Responses; Anthropic Messages). Timing fields report the delays a
test injects through `Script`. It is a fake: no model runs, output is scripted, and where
the protocol leaves a choice open the simplest consistent one is taken. The `fake_ollama`
fixture is in `plugin.py`, which tests/conftest.py loads.
"""

from __future__ import annotations

from tests.support.fake_ollama.access import host_allowed
from tests.support.fake_ollama.gojson import F32, go_json
from tests.support.fake_ollama.incoming import Received
from tests.support.fake_ollama.models import FakeModel, LoadedModel
from tests.support.fake_ollama.script import Script
from tests.support.fake_ollama.server import FakeOllama

__all__ = [
    "F32",
    "FakeModel",
    "FakeOllama",
    "LoadedModel",
    "Received",
    "Script",
    "go_json",
    "host_allowed",
]

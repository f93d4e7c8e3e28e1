"""Run the whole suite through the fast relay: `pytest -p tests.test_fast_relay_mode`.

Loaded as a plugin, the fixture below sets OLLAMA_TAP_RELAY=fast after `_isolated_env`
cleared the environment, so every Settings a test builds (and every `serve` subprocess it
starts) picks the fast relay unless the test names a relay itself. Collected as an ordinary
test module it holds no tests and changes nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fast_relay(_isolated_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_TAP_RELAY", "fast")

"""Run the whole suite through the aiohttp transport: `pytest -p tests.support.aiohttp_relay_mode`.

The default is the HTTP/1 transport (`relay = "fast"`); `aiohttp` remains a setting, so it
must keep passing the same proxy tests. Loaded as a plugin, the fixture below sets
OLLAMA_TAP_RELAY=aiohttp after `_isolated_env` cleared the environment, so every Settings a
test builds (and every `serve` subprocess it starts) picks the aiohttp transport unless the
test names one itself.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _aiohttp_relay(_isolated_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_TAP_RELAY", "aiohttp")

"""Run the whole suite through the aiohttp relay: `pytest -p tests.test_aiohttp_relay_mode`.

The default relay is `fast` (the front and the protocol-level relay); `aiohttp` remains a
setting, so it must keep passing the same proxy tests. Loaded as a plugin, the fixture below
sets OLLAMA_TAP_RELAY=aiohttp after `_isolated_env` cleared the environment, so every
Settings a test builds (and every `serve` subprocess it starts) picks the aiohttp relay
unless the test names a relay itself. Collected as an ordinary test module it holds no tests
and changes nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _aiohttp_relay(_isolated_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_TAP_RELAY", "aiohttp")

"""The load tests use the inspector's headless Chromium fixtures, and the tracker rig."""

from __future__ import annotations

import pytest

from tests.inspector.conftest import chromium_binary, page
from tests.loads.rig import Rig

__all__ = ["chromium_binary", "page"]


@pytest.fixture
def rig() -> Rig:
    r = Rig()
    r.ps({})  # the baseline: nothing loaded
    return r

"""Inspector fixtures: a headless Chromium tab."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.inspector.browser import Page, chromium
from tests.support.system_tools import find_chromium


@pytest.fixture
def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "Chromium is not installed: `apt-get install chromium` (Debian), or set "
            "CHROMIUM_BIN to a Chromium or Chrome binary"
        )
    return binary


@pytest.fixture
async def page(chromium_binary: str, tmp_path: Path) -> AsyncIterator[Page]:
    async with chromium(chromium_binary, tmp_path / "chromium-profile") as tab:
        yield tab

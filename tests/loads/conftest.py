"""The load tests use the inspector's headless Chromium fixtures."""

from __future__ import annotations

from tests.inspector.conftest import chromium_binary, page

__all__ = ["chromium_binary", "page"]

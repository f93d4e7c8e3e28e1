"""Recorder fixtures: exchanges at fixed timestamps, settings on a tmp file, the blocking guard."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster, blockbuster_ctx
from prometheus_client import CollectorRegistry

from proxy.config import Settings
from proxy.recorder import Recorder
from tests.recorder.factory import make_settings


@pytest.fixture
def blockbuster() -> Iterator[BlockBuster]:
    """Fails any blocking call (file, socket, sqlite, sleep) made on the loop by proxy code."""
    with blockbuster_ctx(["proxy"]) as bb:
        yield bb


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def recorder(
    settings: Settings, registry: CollectorRegistry, blockbuster: BlockBuster
) -> AsyncIterator[Recorder]:
    """A started recorder in full mode; stopping it drains the queue."""
    rec = Recorder(settings, registry, digest_of=lambda name: f"sha256:{name}")
    await rec.start()
    yield rec
    await rec.stop()


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> Any:
    return registry.get_sample_value(name, labels or {})

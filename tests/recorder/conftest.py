"""Recorder fixtures: exchanges at fixed timestamps, settings on a tmp file, the blocking guard."""

from __future__ import annotations

import importlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster, blockbuster_ctx
from prometheus_client import CollectorRegistry

from ollama_tap.config import Settings
from ollama_tap.recorder import Recorder
from tests.recorder.factory import make_settings
from tests.support.postgres import PgServer, own_server, pg_server, pg_url

__all__ = ["own_server", "pg_server", "pg_url"]  # fixtures, for the tests of this folder


@pytest.fixture
def blockbuster() -> Iterator[BlockBuster]:
    """Fails any blocking call (file, socket, sqlite, sleep) made on the loop by proxy code.
    The PostgreSQL stores' modules are imported first, as `serve` imports them while it
    builds the app, before its loop serves (recorder/stores.py): otherwise the import's file
    reads (psycopg_pool reads its own metadata) would fail whichever test of a process, or of
    an xdist worker, first makes a PostgreSQL store."""
    importlib.import_module("ollama_tap.recorder.pg_sink")
    importlib.import_module("ollama_tap.recorder.pg_source")
    with blockbuster_ctx(["ollama_tap"]) as bb:
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


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test records, once for each store: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "data" / "records.db"
    url: str = request.getfixturevalue("pg_url")
    return url


def raw_bytes(db: Path | str, server: PgServer | None) -> bytes:
    """Every byte the store holds: the SQLite files, or a pg_dump with its bytea values
    (hex in the dump) decoded, so text inside the stored documents is searchable too."""
    if isinstance(db, Path):
        files = sorted(db.parent.glob(db.name + "*"))
        assert files, "no database file"
        return b"".join(f.read_bytes() for f in files)
    assert server is not None
    dump = server.dump(db)
    return dump + b"".join(
        bytes.fromhex(h.decode()) for h in re.findall(rb"\\\\x([0-9a-f]+)", dump)
    )

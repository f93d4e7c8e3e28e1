"""Which store a --db names: a SQLite file (a path) or PostgreSQL (a postgresql:// URL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.config import ConfigError
from proxy.metrics.registered import RecorderMetrics
from proxy.recorder.backend import Sink, Source
from proxy.recorder.sqlite_sink import SqliteSink
from proxy.recorder.sqlite_source import SqliteSource


def _postgres() -> Any:
    """The PostgreSQL modules, imported only for a postgresql:// --db: psycopg is an extra."""
    try:
        from proxy.recorder import pg_sink, pg_source
    except ImportError as exc:
        raise ConfigError(
            f"a postgresql:// --db needs psycopg ({exc}); install ollama-tap[postgres]."
        ) from None
    return pg_sink, pg_source


def sink_for(location: Path | str, metrics: RecorderMetrics) -> Sink:
    if isinstance(location, Path):
        return SqliteSink(location, metrics)
    sink: Sink = _postgres()[0].PostgresSink(location)
    return sink


def source_for(location: Path | str) -> Source:
    if isinstance(location, Path):
        return SqliteSource(location)
    source: Source = _postgres()[1].PostgresSource(location)
    return source

"""Which store a --db names: a SQLite file (a path) or PostgreSQL (a postgresql:// URL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.config import ConfigError
from proxy.metrics.registered import RecorderMetrics
from proxy.recorder.backend import Sink, Source
from proxy.recorder.sqlite_sink import SqliteSink
from proxy.recorder.sqlite_source import SqliteSource

# psycopg is an extra: without it only a postgresql:// --db is refused. Imported here, at
# start-up, rather than when the first store is made, which may be on the event loop.
try:
    from proxy.recorder import pg_sink, pg_source
except ImportError as exc:  # pragma: no cover - the test extra installs it
    _MISSING: str | None = str(exc)
else:
    _MISSING = None


def _postgres() -> Any:
    if _MISSING is not None:
        raise ConfigError(
            f"a postgresql:// --db needs psycopg ({_MISSING}); install ollama-tap[postgres]."
        )
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

"""Which store a --db names: a SQLite file (a path) or PostgreSQL (a postgresql:// URL)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ollama_tap.config import ConfigError
from ollama_tap.extras import install_command
from ollama_tap.metrics.registered import RecorderMetrics
from ollama_tap.recorder.backend import DB_TIMEOUT, Sink, Source
from ollama_tap.recorder.sqlite_sink import SqliteSink
from ollama_tap.recorder.sqlite_source import SqliteSource


def _postgres() -> tuple[ModuleType, ModuleType]:
    """The PostgreSQL modules, imported for a postgresql:// --db only: psycopg is an extra,
    and importing it makes every start-up noticeably slower. The stores are made while
    the app is built, before it serves, so this import never stalls a serving event loop."""
    try:
        from ollama_tap.recorder import pg_sink, pg_source
    except ImportError as exc:
        raise ConfigError(
            f"a postgresql:// --db needs the postgres extra ({exc}): {install_command('postgres')}"
        ) from None
    return pg_sink, pg_source


def sink_for(location: Path | str, metrics: RecorderMetrics, timeout: float = DB_TIMEOUT) -> Sink:
    """The write side; `timeout` bounds a PostgreSQL statement (Settings.db_timeout)."""
    if isinstance(location, Path):
        return SqliteSink(location, metrics)
    pg_sink, _ = _postgres()
    sink: Sink = pg_sink.PostgresSink(location, timeout)
    return sink


def source_for(location: Path | str, timeout: float = DB_TIMEOUT) -> Source:
    if isinstance(location, Path):
        return SqliteSource(location)
    _, pg_source = _postgres()
    source: Source = pg_source.PostgresSource(location, timeout)
    return source

"""Advice fixtures: PostgreSQL, for the window read on both stores."""

from __future__ import annotations

from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]

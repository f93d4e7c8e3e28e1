"""A records file as version 1 of the schema wrote it, for the migration tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# The v1 schema exactly as it shipped (frozen here on purpose: the test builds the old
# file by hand rather than through the code under test).
V1 = """
CREATE TABLE records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, started REAL NOT NULL,
    method TEXT NOT NULL, path TEXT NOT NULL, query TEXT, endpoint TEXT NOT NULL, model TEXT,
    client TEXT, status INTEGER, outcome TEXT NOT NULL, streamed INTEGER NOT NULL,
    mode TEXT NOT NULL, ttft REAL, ttfc REAL, server_ttft REAL, client_overhead REAL,
    load REAL, queue_wait REAL, prefill REAL, decode REAL, total REAL, duration REAL,
    prompt_tokens INTEGER, eval_tokens INTEGER, context_len INTEGER, done_reason TEXT,
    request_bytes INTEGER NOT NULL, response_bytes INTEGER NOT NULL, chunks INTEGER NOT NULL,
    error_message TEXT, doc BLOB, timeline BLOB);
CREATE INDEX records_started ON records(started);
INSERT INTO records (id, started, method, path, endpoint, model, outcome, streamed, mode,
    request_bytes, response_bytes, chunks, doc)
    VALUES ('old-1', 1750000000.0, 'POST', '/api/chat', '/api/chat', 'llama3.2:latest', 'ok',
    1, 'full', 10, 20, 0, CAST('{"options":{}}' AS BLOB));
PRAGMA user_version = 1;
"""


def build_v1(path: Path) -> None:
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(V1)

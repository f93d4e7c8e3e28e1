"""Bad command-line input ends in one clear line and a non-zero exit, never a traceback and
never a start (the review's list: 13 tracebacks, 9 wrongly accepted)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CASES = [
    (["replay", "serve", "--port", "70000"], "--port 70000 is not a port"),
    (["replay", "serve", "--host", "bogus.invalid"], "cannot be resolved"),
    (["replay", "serve", "--port", "{busy}"], "is in use"),
    (["replay", "serve", "--db", "{notdb}"], "cannot be read as an ollama-tap database"),
    (["replay", "serve", "--speed", "nan"], "--speed must be a number above 0"),
    (["replay", "send", "--to", "http://127.0.0.1:9", "--limit", "-1"], "must be at least 1"),
    (["records", "show", "abc", "--db", "{notdb}"], "cannot be read as an ollama-tap database"),
    (["records", "list", "--limit", "-5", "--db", "{notdb}"], "must be at least 1"),
    (["records", "export", "--db", "{db}", "-o", "{dir}"], "cannot write"),
    (["serve", "--client-header", ""], "is not a header name"),
    (["serve", "--client-header", "Bad Header"], "is not a header name"),
    (["serve", "--instance", "a\nb"], "printable characters"),
    (["serve", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"],
     "--tls-cert /nonexistent.pem is not a file"),
    (["serve", "--port", "0", "--tls-cert", "{garbage}", "--tls-key", "{garbage}"],
     "cannot load --tls-cert"),
]  # fmt: skip


@pytest.fixture
def places(tmp_path: Path) -> Iterator[dict[str, str]]:
    notdb = tmp_path / "notes.txt"
    notdb.write_text("these are notes, not a database\n" * 200)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    (tmp_path / "out").mkdir()
    db = tmp_path / "data" / "records.db"
    from ollama_tap.recorder.schema import open_writer  # an empty, valid database

    db.parent.mkdir(mode=0o700)
    open_writer(db).close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield {
            "notdb": str(notdb), "garbage": str(garbage), "dir": str(tmp_path / "out"),
            "db": str(db), "busy": str(busy.getsockname()[1]),
        }  # fmt: skip


@pytest.mark.parametrize(("argv", "said"), CASES, ids=lambda v: " ".join(v)[:40])
def test_one_line_and_a_non_zero_exit(
    argv: list[str], said: str, places: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_TAP_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env["OLLAMA_TAP_ADMIN_TOKEN"] = "a-token-for-the-tests-0123456789"
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", *(a.format(**places) for a in argv)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # argparse's usage block, then its one line; else the command's one line.
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith(("usage:", " "))]
    assert len(lines) == 1, done.stderr

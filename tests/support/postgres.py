"""A real PostgreSQL server for the tests: Debian's binaries, `initdb` in a temporary
directory, on a free port, owned by an unprivileged user when the suite runs as root (the
server refuses to run as root). The system's own service is never used or started."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.serve_process import free_port

PASSWORD_USER = "tap_pw"
PASSWORD = "pw-SECRET-never-printed-42"
"""A role that must log in with a password over TCP (the others are trusted)."""


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PgServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="ollama-tap-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "nobody" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        hba = self.data / "pg_hba.conf"
        rule = f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, check=True, capture_output=True, cwd=self.root, timeout=60)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=200 -c full_page_writes=off"
        )
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def processes(self) -> list[int]:
        """The postmaster and every process it started (backends, workers)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        found = [postmaster]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # The fields after the command name (in parentheses): state, ppid, ...
                if int(stat.read_text().rpartition(")")[2].split()[1]) == postmaster:
                    found.append(int(stat.parent.name))
        return found

    def freeze(self) -> None:
        """Stop every process of the server (SIGSTOP): its kernel still accepts connections
        and acknowledges data, and nothing ever answers, like a server hung on its disk."""
        for pid in self.processes():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def url(self, db: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
            conn.execute(f"GRANT ALL ON DATABASE {name} TO PUBLIC")
            conn.execute(f"ALTER DATABASE {name} OWNER TO {PASSWORD_USER}")
        return self.url(name)

    def add_password_user(self) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")

    def dump(self, url: str) -> bytes:
        """Everything in the database as pg_dump writes it (schema and data, as text)."""
        return self._run("pg_dump", "--no-owner", url).stdout

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _running() -> Iterator[PgServer]:
    """A started server with its password user, closed after; a skip naming the fix when
    PostgreSQL is not installed."""
    found = binaries()
    if found is None:
        pytest.skip("PostgreSQL is not installed (make system-deps installs Debian's)")
    server = PgServer(found)
    try:
        server.start()
        server.add_password_user()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the session (a fresh database per test: `pg_url`)."""
    yield from _running()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    return pg_server.new_database()


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of the test's own, to stop and start again."""
    yield from _running()

"""One tap per default database: a second `serve` on the same host is refused, with the fix.

Two taps started with the same settings but different ports (`serve` twice, or a second
one for another Ollama) would otherwise write into the same default SQLite file under the
same instance name (the host name), and their records could not be told apart. The first
tap claims the default database with a lock file beside it, held for as long as it runs;
a second one is refused at start and told which tap holds it and what to give instead.

Refused rather than given a file of its own: a silently separate file splits the history
(`records list`, `replay`, the inspector of the first tap read the default file only), and
a tap started twice by mistake is better stopped than hidden. A database named on purpose
(`--db`) is never claimed: two taps may share one on purpose (SQLite takes turns between
writers; PostgreSQL is meant for it), and then each gives its own `--instance`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ollama_tap.config import ConfigError, RecordMode, Settings


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".tap-lock")


@contextlib.contextmanager
def claimed(settings: Settings) -> Iterator[None]:
    """Hold the default database for this tap while the block runs; ConfigError naming the
    tap that holds it and the fix when another one does. Nothing is claimed when this tap
    records nothing or was given its database."""
    if settings.db is not None or settings.record_mode is RecordMode.OFF:
        yield
        return
    db = settings.db_path
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another tap"
            raise ConfigError(
                f"the default database {db} is in use by {holder}; give this tap its own: "
                f"--db {db.with_name(f'records-{settings.port}.db')} "
                f"--instance {settings.instance_name}-{settings.port}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"the tap on port {settings.port} (pid {os.getpid()})\n".encode())
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor

"""--db aimed at something that is not a regular file is refused before anything is made or
has its mode changed (run as root, `serve --db /dev/null` made /dev/null 0600)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ollama_tap.config import ConfigError, Settings
from ollama_tap.dbfile import create_private
from ollama_tap.recorder.schema import open_writer


def _serve(db: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_TAP_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    return subprocess.run(
        [sys.executable, "-m", "ollama_tap", "serve", "--db", db, "--port", "0"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def _targets(tmp_path: Path) -> dict[str, Path]:
    found = {}
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    found["a named pipe"] = fifo
    link = tmp_path / "link.db"
    link.symlink_to(fifo)
    found["a symbolic link"] = link
    (tmp_path / "dir.db").mkdir()
    found["a directory"] = tmp_path / "dir.db"
    if os.geteuid() == 0:  # a device node of its own: /dev/null's inode is never touched
        node = tmp_path / "null"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.chmod(node, 0o666)
        found["a character device"] = node
    return found


def test_serve_refuses_what_is_no_file_and_changes_nothing(tmp_path: Path) -> None:
    for kind, target in _targets(tmp_path).items():
        before = os.lstat(target)
        done = _serve(str(target), tmp_path)
        assert done.returncode == 2, (kind, done.stderr)
        assert f"is {kind}" in done.stderr and "--db" in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        after = os.lstat(target)
        assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode), kind
        assert not (target.parent / "admin-token").exists()


def test_the_writer_refuses_a_device_even_past_the_settings(tmp_path: Path) -> None:
    target = _targets(tmp_path)["a named pipe"]
    with pytest.raises(ConfigError, match="is a named pipe"):
        open_writer(target)
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o644


def test_an_empty_file_is_made_private_and_used(tmp_path: Path) -> None:
    empty = tmp_path / "records.db"
    empty.touch(0o644)
    empty.chmod(0o644)
    open_writer(empty).close()
    assert stat.S_IMODE(empty.stat().st_mode) == 0o600
    create_private(tmp_path / "new" / "records.db")
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700


@pytest.mark.parametrize(
    ("db", "shown"),
    [("mysql://u:pw-SECRET@h/db", "mysql://u@h/db"), ("sqlite:////x.db", "sqlite:"), ("", "")],
)
def test_a_url_that_is_not_postgresql_is_refused(tmp_path: Path, db: str, shown: str) -> None:
    done = _serve(db, tmp_path)
    assert done.returncode == 2 and "neither a file path nor a postgresql:// URL" in done.stderr
    assert shown in done.stderr and "SECRET" not in done.stderr
    assert not any(tmp_path.glob("mysql*")) and not (tmp_path / "admin-token").exists()
    with pytest.raises(ValueError, match="postgresql://"):
        Settings(db=db)

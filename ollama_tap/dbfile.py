"""What a SQLite --db may be: a regular file, or a path where one can be made.

The recorder creates its file 0600 and tightens an existing one to 0600, and the admin token
is written beside it: aimed at anything else, that changes what it is aimed at (run as root,
`--db /dev/null` made /dev/null unreadable to every other user and wrote /dev/admin-token).
So the path is looked at without following a link (`lstat`) before anything is made, and the
file is opened without following one and checked again on the descriptor that is changed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ollama_tap.settings_error import ConfigError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)
_FIX = (
    "point --db (OLLAMA_TAP_DB) at a file, e.g. ~/.local/share/ollama-tap/records.db, or at a "
    "postgresql:// URL"
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check(path: Path) -> None:
    """Refuse (ConfigError naming the fix) a --db that exists and is not a regular file, is
    a symbolic link, or lies under something that is not a directory."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        parent = path.parent
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"--db {path}: {parent} is not a directory; {_FIX}") from None
        return
    except OSError as exc:
        raise ConfigError(f"cannot use --db {path} ({exc.strerror}); {_FIX}") from None
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(
            f"--db {path} is a symbolic link (to {os.readlink(path)}); give the file itself, "
            "so that its mode is set on what the recorder writes to"
        )
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"--db {path} is {_kind(info.st_mode)}, not a file; {_FIX}")


def create_private(path: Path) -> None:
    """Create the file 0600 (and its directory 0700) before SQLite writes a byte, or set an
    existing one to 0600: through a descriptor opened without following a link and checked
    to be a regular file, so nothing else ever has its mode changed.

    SQLite gives the -wal and -shm files the mode of the database file, so they are
    private too."""
    check(path)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot open --db {path} ({exc.strerror}); {_FIX}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced since `check`
            raise ConfigError(f"--db {path} is {_kind(mode)}, not a file; {_FIX}")
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)

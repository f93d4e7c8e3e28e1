"""A listen port already taken: found before anything starts, said in one line with the fix
and, where /proc tells, the program that holds it."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Final

from ollama_tap.config import bind_addresses

_LISTEN: Final = "0A"
"""The LISTEN state in /proc/net/tcp's `st` column."""
_COMMAND_CHARS: Final = 60


SERVE_FIX: Final = "--port (OLLAMA_TAP_PORT)"


def busy_message(host: str, port: int, fix: str = SERVE_FIX) -> str | None:
    """Why `host:port` cannot be listened on because something else listens there, or None
    (free, or failing some other way, which the real bind then reports); `fix` is the
    option that listens elsewhere."""
    if port == 0:
        return None
    try:
        addresses = bind_addresses(host)
    except OSError:
        return None
    for address in addresses:
        if _in_use(address, port):
            return in_use_message(host, port, fix)
    return None


def in_use_message(host: str, port: int, fix: str = SERVE_FIX) -> str:
    holder = listener(port)
    who = f"by {holder}" if holder else "by another program"
    return f"{host}:{port} is in use {who}; stop it, or listen elsewhere with {fix}"


def _in_use(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As asyncio binds: a port with connections in TIME_WAIT is free, a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def listener(port: int, proc: Path = Path("/proc")) -> str | None:
    """`pid N (command line)` of a process listening on `port`, when /proc shows it (Linux,
    and only processes this user may look into)."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (pid_dir / "fd").iterdir()}
        except OSError:
            continue  # gone, or another user's
        if links & {f"socket:[{inode}]" for inode in inodes}:
            return f"pid {pid_dir.name} ({_command(pid_dir)})"
    return None


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            listening = len(fields) > 9 and fields[3] == _LISTEN
            if listening and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    return inodes


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    # One line whatever the arguments hold (a `python -c` program spans several).
    command = " ".join(raw.decode(errors="replace").replace("\0", " ").split())
    if len(command) > _COMMAND_CHARS:
        command = command[: _COMMAND_CHARS - 1] + "…"
    return command or "?"

"""The suite's command-line tools from Debian, kept out of the system: where they are, and
`make system-deps`, which provides them (stdlib only: it runs before any venv exists).

Prometheus, promtool, Alertmanager and amtool are unpacked from their Debian packages
(`apt-get download` + `dpkg-deb -x`, no maintainer scripts: no user, no unit, no service
started) into `${OLLAMA_TAP_TEST_CACHE:-~/.cache/ollama-tap-tests}/debs/root`, and the tests
run them from there, before any on PATH. Chromium, openssl and tmux (the terminal the CLI's
tests read at 80×24) are installed through apt only when absent, and `--no-upgrade` leaves
every installed package as it is. Chromium is not unpacked like the others: it needs some
hundred shared-library packages whose maintainer scripts (ldconfig, the fontconfig cache,
gdk-pixbuf's loaders) a bare unpack skips.

    python3 tests/support/system_tools.py     # provide or reuse; progress on stderr
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

UNPACKED: Final = ("prometheus", "prometheus-alertmanager")
"""The Debian packages unpacked into the cache, never installed."""
UNPACKED_TOOLS: Final = ("prometheus", "promtool", "prometheus-alertmanager", "amtool")
CHROMIUM_ENV: Final = ("CHROMIUM_BIN", "CHROME_BIN")
"""Environment variables that may name the browser binary (CHROME_BIN as Karma reads it)."""
CHROMIUM_NAMES: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_PATHS: Final = ("/usr/bin/chromium", "/usr/lib/chromium/chromium")
INSTALLED_WHEN_ABSENT: Final = {
    "chromium": ("chromium", "fonts-dejavu-core"),
    "openssl": ("openssl",),
    "tmux": ("tmux",),
}
"""A tool missing from the system, and the packages apt installs for it."""


def cache_root() -> Path:
    """OLLAMA_TAP_TEST_CACHE, else ~/.cache/ollama-tap-tests (the engine's cache too)."""
    given = os.environ.get("OLLAMA_TAP_TEST_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "ollama-tap-tests"


def unpacked_root(root: Path | None = None) -> Path:
    return (root or cache_root()) / "debs" / "root"


def find_tool(name: str) -> str | None:
    """A tool unpacked into the cache, else on PATH, else beside this Python (wheels install
    their binaries into the venv)."""
    cached = unpacked_root() / "usr" / "bin" / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def find_chromium() -> str | None:
    """The Chromium binary: $CHROMIUM_BIN or $CHROME_BIN, else one on PATH or Debian's."""
    named = [os.environ.get(name) for name in CHROMIUM_ENV]
    found = [shutil.which(name) for name in CHROMIUM_NAMES]
    for candidate in (*named, *found, *CHROMIUM_PATHS):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def say(message: str) -> None:
    print(f"system-deps: {message}", file=sys.stderr, flush=True)


def _as_root(*command: str) -> list[str]:
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    return [*sudo, "env", "DEBIAN_FRONTEND=noninteractive", *command]


def _run(command: list[str], cwd: Path | None = None) -> bool:
    say("$ " + shlex.join(command))
    return subprocess.run(command, cwd=cwd, check=False).returncode == 0


def _apt_update() -> None:
    if not _run(_as_root("apt-get", "update", "-qq")):
        raise SystemExit("system-deps: `apt-get update` failed")


def unpack(root: Path) -> Path:
    """The packages of UNPACKED, downloaded and unpacked into the cache unless they are there.
    A fresh machine has no package lists yet: a failed download updates them and tries again."""
    target = unpacked_root(root)
    if all((target / "usr" / "bin" / tool).is_file() for tool in UNPACKED_TOOLS):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        # Run as this user, into this folder: `-o APT::Sandbox::User` keeps root's apt
        # from handing the download to `_apt`, which may not write here.
        download = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=" + _user(), *UNPACKED]
        if not _run(download, cwd=Path(tmp)):
            _apt_update()
            if not _run(download, cwd=Path(tmp)):
                raise SystemExit(f"system-deps: cannot download {' '.join(UNPACKED)}")
        staged = Path(tmp, "root")
        for deb in sorted(Path(tmp).glob("*.deb")):
            if not _run(["dpkg-deb", "-x", str(deb), str(staged)]):
                raise SystemExit(f"system-deps: cannot unpack {deb.name}")
        if target.exists():
            shutil.rmtree(target)  # an interrupted unpack
        staged.rename(target)
    return target


def _user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def absent() -> list[str]:
    """The tools of INSTALLED_WHEN_ABSENT this machine lacks."""
    present = {
        "chromium": find_chromium(),
        "openssl": shutil.which("openssl"),
        "tmux": shutil.which("tmux"),
    }
    return [tool for tool in INSTALLED_WHEN_ABSENT if present[tool] is None]


def install(tools: list[str]) -> None:
    """The packages of `tools` through apt, upgrading nothing already installed."""
    packages = [package for tool in tools for package in INSTALLED_WHEN_ABSENT[tool]]
    if not packages:
        return
    _apt_update()
    command = _as_root("apt-get", "install", "-y", "-qq", "--no-upgrade",
                       "--no-install-recommends", *packages)  # fmt: skip
    if not _run(command):
        raise SystemExit(f"system-deps: cannot install {' '.join(packages)}")


def main() -> int:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".debs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two clones running `make test` share the cache
        target = unpack(root)
    install(absent())
    say(f"{', '.join(UNPACKED_TOOLS)} in {target / 'usr' / 'bin'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

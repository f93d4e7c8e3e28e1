"""What the real tiers' provisioning scripts share: the cache, progress lines, locks, the CLI.

tests/engine/provision.py (llama-server and the GGUF) and tests/ollama_real/provision.py
(Ollama, the second GGUF, ollama-js) run under `make` before pytest, each as a script that
builds or reuses what its tier needs under the test cache and, with `--env`, prints the
`export` lines that name it for pytest. Each step says what it runs on stderr, prefixed with
the script's name, so a long cold build in `make test`'s output says whose it is.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MAKE_FLAGS = frozenset({"MAKEFLAGS", "MFLAGS", "MAKELEVEL"})
"""The outer make's variables: its jobserver and directory messages would reach the builds
(cmake's, go's cgo compiler calls) these scripts start."""


def cache_root() -> Path:
    """Where the tiers' builds are kept: OLLAMA_TAP_TEST_CACHE, else ~/.cache/ollama-tap-tests."""
    given = os.environ.get("OLLAMA_TAP_TEST_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "ollama-tap-tests"


def build_env(**extra: str) -> dict[str, str]:
    """This process's environment for a build, without make's flags, with `extra` on top."""
    return {**{k: v for k, v in os.environ.items() if k not in MAKE_FLAGS}, **extra}


class Steps:
    """One script's progress lines and commands, each line prefixed with `who`."""

    def __init__(self, who: str) -> None:
        self.who = who

    def say(self, message: str) -> None:
        print(f"{self.who}: {message}", file=sys.stderr, flush=True)

    def run(
        self, *command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Run a command, said first; a failure ends the script with its status."""
        self.say("$ " + shlex.join(str(part) for part in command))
        subprocess.run([str(part) for part in command], cwd=cwd, env=env, check=True)

    def scratch_packages(self, folder: Path, requirement: str) -> dict[str, str]:
        """`requirement` installed into `folder` (not the venv: the tests never import it);
        the environment that runs a module of it."""
        self.run(
            sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
            "--target", folder, requirement,
        )  # fmt: skip
        return {**os.environ, "PYTHONPATH": str(folder)}


@contextmanager
def locked(root: Path, name: str) -> Iterator[None]:
    """One provisioning at a time per cache and lock file: two clones running `make test` at
    once share the cache, and two builds in one build folder would spoil each other."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / name).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def export_lines(paths: dict[str, Path]) -> str:
    """Shell `export` lines naming each path by its variable."""
    return "".join(f"export {name}={shlex.quote(str(path))}\n" for name, path in paths.items())


def script(
    doc: str | None,
    steps: Steps,
    paths: Callable[[Path], dict[str, Path]],
    provision: Callable[[Path], None],
    argv: list[str] | None = None,
) -> int:
    """A provisioning script's command line: build or reuse (`provision`), or with `--env`
    print the `export` lines of `paths` without building anything."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--env", action="store_true", help="print the paths as export lines")
    args = parser.parse_args(argv)
    root = cache_root()
    if args.env:
        sys.stdout.write(export_lines(paths(root)))
        return 0
    started = time.monotonic()
    provision(root)
    made = " and ".join(str(path) for path in paths(root).values())
    steps.say(f"{made} ready in {time.monotonic() - started:.1f} s")
    return 0

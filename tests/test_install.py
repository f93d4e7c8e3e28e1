"""Installing from a clone as the README says: `make run`'s Python check and its fallback to
the interpreted build, and `pip install .` into a fresh virtual environment. Each works on a
copy of the working tree, so the clone's own venv and build are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow
"""The slow tier (`make test-slow`): `make test` runs it only when a packaging file changed."""

# A Python 3.10 as Ubuntu 22.04 has it: it answers -V, and fails the version test.
PY310 = '#!/bin/sh\n[ "$1" = -V ] && { echo "Python 3.10.12"; exit 0; }\nexit 1\n'


def _env(**extra: str) -> dict[str, str]:
    # Not an outer make's flags (`make unit` runs pytest): its jobserver and directory messages;
    # nor the suite's PYTHONPATH, whose import hook would run this clone's sources, not the copy's.
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "OLLAMA_TAP_PURE_PYTHON", "CC", "VIRTUAL_ENV"}
    drop |= {"PYTHONPATH", "OLLAMA_TAP_COMPILED"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The working tree's files as git sees them (tracked and new, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    target = tmp_path / "clone"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


MAKE_HANG: Final = 1800.0
"""Seconds after which a `make` is taken for hung: a fresh venv and a mypyc build took more
than 10 minutes on a loaded 2-core machine."""


def make(clone: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=clone, env=_env(**env),
        capture_output=True, text=True, timeout=MAKE_HANG, check=False,
    )  # fmt: skip


def test_an_old_python_is_refused_first_with_the_fix(clone: Path) -> None:
    old = clone / "python3.10"
    old.write_text(PY310)
    old.chmod(0o755)
    proc = make(clone, "run", f"PYTHON={old}")
    assert proc.returncode != 0
    assert f"ollama-tap needs Python 3.11 or newer; {old} is Python 3.10.12." in proc.stderr
    assert "sudo apt install python3.11 python3.11-venv" in proc.stderr
    assert "make run PYTHON=python3.11" in proc.stderr
    assert not (clone / ".venv").exists(), "checked before anything was installed"


def test_make_run_falls_back_to_the_interpreted_build(clone: Path) -> None:
    """No compiler (CC names none): one line, then the proxy; the same with the README's
    OLLAMA_TAP_PURE_PYTHON=1. Both end by saying how to get `ollama-tap` on PATH."""
    run = ("run", f"PYTHON={sys.executable}", "ARGS=--help")
    proc = make(clone, *run, CC="/nonexistent/cc")
    assert proc.returncode == 0, proc.stderr
    assert "compiling the fast path (2–3 minutes, once" in proc.stdout
    fallback = [line for line in proc.stdout.splitlines() if "interpreted build" in line]
    assert fallback == [
        "no C compiler worked (.venv/compile.log): running the interpreted build, the same "
        "proxy with a slower relay"
    ]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr.lower()
    venv_bin = clone / ".venv" / "bin"
    assert f'export PATH="{venv_bin}:$PATH"' in proc.stdout
    assert "pipx install ." in proc.stdout
    assert "Listen for Ollama clients" in proc.stdout  # `serve --help` ran
    assert not list((clone / "ollama_tap").rglob("*.so"))

    proc = make(clone, *run, OLLAMA_TAP_PURE_PYTHON="1")
    assert proc.returncode == 0, proc.stderr
    assert "OLLAMA_TAP_PURE_PYTHON=1: running the interpreted build" in proc.stdout
    assert "compiling" not in proc.stdout
    assert "Listen for Ollama clients" in proc.stdout


def test_make_run_compiles_the_fast_path_without_the_extras(clone: Path) -> None:
    """`make run` installs no extra (no opentelemetry, no psycopg): the compiled build must
    not need them to type the modules it imports."""
    proc = make(clone, "run", f"PYTHON={sys.executable}", "ARGS=--help")
    assert proc.returncode == 0, proc.stderr
    assert "compiling the fast path" in proc.stdout
    assert "interpreted build" not in proc.stdout, (clone / ".venv/compile.log").read_text()
    assert list((clone / "ollama_tap" / "relay").glob("tap.*.so"))
    assert "Listen for Ollama clients" in proc.stdout
    python = clone / ".venv" / "bin" / "python"
    for extra in ("opentelemetry.sdk", "psycopg"):
        found = subprocess.run(
            [str(python), "-c", f"import {extra}"], capture_output=True, check=False
        )
        assert found.returncode != 0, f"{extra} is installed: the test proves nothing"


def test_pipx_install_of_the_clone_puts_a_working_command_on_path(
    clone: Path, tmp_path: Path
) -> None:
    """The README's `pipx install .`, with pipx from PyPI in a venv of its own and its home and
    bin directory in the test's folder. Plain Python (the compiled build is `make run`'s)."""
    tools = tmp_path / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True, timeout=120)
    got = subprocess.run(
        [str(tools / "bin" / "python"), "-m", "pip", "install", "-q", "pipx"],
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    home, bin_dir = tmp_path / "pipx", tmp_path / "bin"
    env = _env(PIPX_HOME=str(home), PIPX_BIN_DIR=str(bin_dir), OLLAMA_TAP_PURE_PYTHON="1")
    installed = subprocess.run(
        [str(tools / "bin" / "pipx"), "install", str(clone)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    helped = subprocess.run(
        [str(bin_dir / "ollama-tap"), "--help"], capture_output=True, text=True, timeout=60,
        env=_env(),
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout and "records" in helped.stdout


def test_installs_beside_proxy_py_and_both_import(clone: Path, tmp_path: Path) -> None:
    """PyPI's proxy.py installs a top-level `proxy` package: ollama-tap's import name,
    `ollama_tap`, leaves it alone, so one environment holds both and each imports its own."""
    venv = tmp_path / "both"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    for wanted in ("proxy.py", str(clone)):
        got = subprocess.run(
            [python, "-m", "pip", "install", "-q", wanted],
            env=_env(OLLAMA_TAP_PURE_PYTHON="1"), capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
    script = "import proxy, ollama_tap.cli; print(proxy.__file__); print(ollama_tap.cli.__file__)"
    both = subprocess.run(
        [python, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert both.returncode == 0, both.stderr
    proxy_file, tap_file = both.stdout.split()
    assert Path(proxy_file).parent.name == "proxy" and "site-packages" in proxy_file
    assert Path(tap_file).parent.name == "cli" and "site-packages" in tap_file

"""The real Ollama of tests/ollama_real: built from its Go module, with two GGUFs to import.

`make ollama` runs this. Ollama v0.24.0 is the last release whose inference engine (ggml's CPU
backend and llama.cpp) is compiled into the Go binary with cgo, so `go install` of the module
gives a whole CPU Ollama; later releases run llama.cpp's `llama-server` as a subprocess
(docs/real-engine.md says what that takes). The model is the Gemma 3 270M GGUF that
tests/engine/provision.py assembles, and a second file with the same weights and a rewritten
`general.name`, so its digest (Ollama's blob, and so its runner) differs: with
OLLAMA_MAX_LOADED_MODELS=1 one evicts the other.

Everything lives under `${OLLAMA_TAP_TEST_CACHE:-~/.cache/ollama-tap-tests}`, in folders named
by version; every step is skipped when its result is there, and `go install` is a no-op on a
finished build (Go's build cache, ~/.cache/go-build, holds the compiled packages).

    python tests/ollama_real/provision.py          # build or reuse; progress on stderr
    python tests/ollama_real/provision.py --env    # the `export` lines `make unit` gives pytest
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

if __package__ in (None, ""):  # run as a script: the clone's root on the path, for `tests.`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine.provision import (
    assemble_gguf,
    cache_root,
    gguf_path,
    sources_dir,
    unpack_sources,
)
from tests.engine.provision import locked as engine_locked

OLLAMA: Final = "0.24.0"
"""The Ollama release built (its Go module version, without the `v`)."""
GGUF_PY: Final = "0.19.0"
"""The `gguf` package (llama.cpp's gguf-py) whose gguf-new-metadata writes the second model."""
SECOND_NAME: Final = "gemma3-270m-second"
"""The `general.name` of the second GGUF: what makes its bytes, and so its digest, differ."""

NATIVE: Final = {"CGO_CFLAGS": "-O3 -march=native", "CGO_CXXFLAGS": "-O3 -march=native"}
"""Tuned for this machine's CPU, as the engine's llama-server is (GGML_NATIVE): Ollama's cgo
directives name no instruction set, so a plain `go install` compiles ggml's CPU kernels for
baseline x86-64 (SSE2), and Gemma 3 270M then decodes at about a token a second on 2 cores."""

OLLAMA_VAR: Final = "OLLAMA_TAP_TEST_OLLAMA"
SECOND_VAR: Final = "OLLAMA_TAP_TEST_GGUF_SECOND"
GGUF_VAR: Final = "OLLAMA_TAP_TEST_GGUF"


def ollama_path(root: Path) -> Path:
    return root / f"ollama-{OLLAMA}" / "bin" / "ollama"


def second_gguf_path(root: Path) -> Path:
    return root / f"gguf-second-{GGUF_PY}" / "gemma-3-270m-second.gguf"


def say(message: str) -> None:
    print(f"ollama: {message}", file=sys.stderr, flush=True)


def run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    say("$ " + shlex.join(str(part) for part in command))
    subprocess.run([str(part) for part in command], env=env, check=True)


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """One provisioning at a time per cache, as tests/engine/provision.py does, on a lock file
    of its own: a clone building the engine does not wait for one building Ollama."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".ollama.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_ollama(root: Path, vendor: Path) -> Path:
    """`go install github.com/ollama/ollama@vX` with cgo, into the version's own folder.

    The module zip on the Go proxy leaves out Ollama's `vendor/` folders (Go drops every
    `vendor/` directory of a module), so the cgo sources' `nlohmann/json.hpp`,
    `miniaudio/miniaudio.h` and `stb/stb_image.h` are missing. The llama.cpp sources the
    engine tier unpacks (`vendor`) carry the same vendored headers; they are put on gcc's
    CPATH rather than in CGO_CPPFLAGS because Go keys its build cache on CGO_CPPFLAGS but not
    on CPATH: the cache root's path would otherwise make every clone and machine recompile
    all of ggml.
    The version is stamped as a release's is (`version.Version`): a source build says 0.0.0,
    and the proxy reads /api/version to pick the truncation rules of the era."""
    binary = ollama_path(root)
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise SystemExit("ollama: go not found: the real-Ollama tier needs Go 1.24 or newer")
    missing = [tool for tool in ("gcc", "g++") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"ollama: {' and '.join(missing)} not found: `make ollama` installs them")
    cpath = os.pathsep.join(filter(None, [str(vendor), os.environ.get("CPATH")]))
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        env = {**os.environ, "CGO_ENABLED": "1", "GOBIN": tmp, "CPATH": cpath, **NATIVE}
        # Not the outer make's flags: its jobserver would reach go's cgo compiler calls.
        env = {k: v for k, v in env.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
        stamp = f"-X=github.com/ollama/ollama/version.Version={OLLAMA}"
        run("go", "install", f"-ldflags={stamp}", f"github.com/ollama/ollama@v{OLLAMA}", env=env)
        built = Path(tmp, "ollama")
        subprocess.run([built, "--version"], check=True, capture_output=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        built.replace(binary)
    return binary


def second_gguf(root: Path, first: Path) -> Path:
    """The same weights under another `general.name`, written by gguf-py's own
    gguf-new-metadata (installed in a scratch folder: the tests never import it)."""
    target = second_gguf_path(root)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        packages, partial = Path(tmp, "packages"), Path(tmp, target.name)
        run(
            sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
            "--target", packages, f"gguf=={GGUF_PY}",
        )  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(packages)}
        run(
            sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--force",
            "--general-name", SECOND_NAME, first, partial, env=env,
        )  # fmt: skip
        partial.replace(target)
    return target


def env_lines(root: Path) -> str:
    """Shell `export` lines naming the binary and the two models, for pytest."""
    paths = (
        (OLLAMA_VAR, ollama_path(root)),
        (GGUF_VAR, gguf_path(root)),
        (SECOND_VAR, second_gguf_path(root)),
    )
    return "".join(f"export {name}={shlex.quote(str(path))}\n" for name, path in paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", action="store_true", help="print the paths as export lines")
    args = parser.parse_args(argv)
    root = cache_root()
    if args.env:
        sys.stdout.write(env_lines(root))
        return 0
    started = time.monotonic()
    vendor, first = sources_dir(root) / "vendor", gguf_path(root)
    if not vendor.is_dir() or not first.exists():
        # What tests/engine/provision.py makes, under its lock; not taken when there is nothing
        # to make, since a clone building llama-server holds it for half an hour.
        with engine_locked(root):
            unpack_sources(root)
            assemble_gguf(root)
    with locked(root):
        binary = build_ollama(root, vendor)
        second = second_gguf(root, first)
    say(f"{binary} and {second} ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

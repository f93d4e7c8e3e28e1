"""The real Ollama of tests/ollama_real: built from its Go module, with two GGUFs to import.

`make ollama` runs this. Two releases, one of each era: v0.24.0, the last whose inference
engine (ggml's CPU backend and llama.cpp) is compiled into the Go binary with cgo, so `go
install` of the module gives a whole CPU Ollama; and v0.30.0, the first that runs llama.cpp's
`llama-server` as a subprocess, found in `lib/ollama/` beside `bin/`: there the engine tier's
`llama-server` (through a wrapper, `RUNNER_WRAPPER`) and `llama-quantize`, built in the same
llama.cpp build folder (docs/real-engine.md says what that takes). The model is the Gemma 3
270M GGUF that tests/engine/provision.py assembles, and a second file with the same weights
and a rewritten `general.name`, so its digest (Ollama's blob, and so its runner) differs:
with OLLAMA_MAX_LOADED_MODELS=1 one evicts the other; and a third with `gemma3.pooling_type`
set, an embedding model to v0.30.0 (tests/ollama_real/embedding_gguf.py). ollama-js, the
official JavaScript client, is installed from npm beside them, for the tier to run unchanged
through the proxy.

Everything lives under `${OLLAMA_TAP_TEST_CACHE:-~/.cache/ollama-tap-tests}`, in folders named
by version; every step is skipped when its result is there, and `go install` is a no-op on a
finished build (Go's build cache, ~/.cache/go-build, holds the compiled packages).

    python tests/ollama_real/provision.py          # build or reuse; progress on stderr
    python tests/ollama_real/provision.py --env    # the `export` lines `make unit` gives pytest
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

if __package__ in (None, ""):  # run as a script: the clone's root on the path, for `tests.`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine import provision as engine
from tests.support.provisioning import Steps, build_env, locked, script

OLLAMA: Final = "0.24.0"
"""The Go-runner release built (its Go module version, without the `v`)."""
CURRENT: Final = "0.30.0"
"""The llama-server-runner release built beside it."""
GGUF_PY: Final = "0.19.0"
"""The `gguf` package (llama.cpp's gguf-py) whose gguf-new-metadata writes the second model."""
SECOND_NAME: Final = "gemma3-270m-second"
"""The `general.name` of the second GGUF: what makes its bytes, and so its digest, differ."""
EMBED_NAME: Final = "gemma3-270m-embed"
"""The `general.name` of the embedding GGUF."""

NATIVE: Final = {"CGO_CFLAGS": "-O3 -march=native", "CGO_CXXFLAGS": "-O3 -march=native"}
"""Tuned for this machine's CPU, as the engine's llama-server is (GGML_NATIVE): Ollama's cgo
directives name no instruction set, so a plain `go install` compiles ggml's CPU kernels for
baseline x86-64 (SSE2), and Gemma 3 270M then decodes at about a token a second on 2 cores."""

OLLAMA_VAR: Final = "OLLAMA_TAP_TEST_OLLAMA"
CURRENT_VAR: Final = "OLLAMA_TAP_TEST_OLLAMA_CURRENT"
SECOND_VAR: Final = "OLLAMA_TAP_TEST_GGUF_SECOND"
EMBED_VAR: Final = "OLLAMA_TAP_TEST_GGUF_EMBED"
GGUF_VAR: Final = engine.GGUF_VAR
JS_VAR: Final = "OLLAMA_TAP_TEST_OLLAMA_JS"
OLLAMA_JS: Final = "0.6.4"
"""ollama-js, the `ollama` package on npm: the official JavaScript client, run unchanged."""

QUANTIZE: Final = "llama-quantize"
"""The llama.cpp tool a llama-server release runs to validate a GGUF at `ollama create`."""

STEPS: Final = Steps("ollama")
LOCK: Final = ".ollama.lock"
"""Its own lock file: a clone building the engine does not wait for one building Ollama."""


def ollama_path(root: Path, version: str = OLLAMA) -> Path:
    return root / f"ollama-{version}" / "bin" / "ollama"


def runner_dir(binary: Path) -> Path:
    """Where a llama-server release of Ollama at `binary` looks for its runner:
    `<bin>/../lib/ollama` on Linux (`ml.LibOllamaPath`, llm/llama_binary.go
    `FindLlamaCppBinary`)."""
    return binary.parents[1] / "lib" / "ollama"


def second_gguf_path(root: Path) -> Path:
    return root / f"gguf-second-{GGUF_PY}" / "gemma-3-270m-second.gguf"


def build_ollama(root: Path, vendor: Path, version: str = OLLAMA) -> Path:
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
    binary = ollama_path(root, version)
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise SystemExit("ollama: go not found: the real-Ollama tier needs Go 1.24 or newer")
    missing = [tool for tool in ("gcc", "g++") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"ollama: {' and '.join(missing)} not found: `make ollama` installs them")
    cpath = os.pathsep.join(filter(None, [str(vendor), os.environ.get("CPATH")]))
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        env = build_env(CGO_ENABLED="1", GOBIN=tmp, CPATH=cpath, **NATIVE)
        stamp = f"-X=github.com/ollama/ollama/version.Version={version}"
        module = f"github.com/ollama/ollama@v{version}"
        STEPS.run("go", "install", f"-ldflags={stamp}", module, env=env)
        built = Path(tmp, "ollama")
        subprocess.run([built, "--version"], check=True, capture_output=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        built.replace(binary)
    return binary


RUNNER_WRAPPER: Final = """#!/bin/sh
# Written by tests/ollama_real/provision.py. Ollama {version} turns mmap off on a CPU
# (server/sched.go applyLlamaServerMmapDefaults) and says so with --no-mmap, a flag the
# llama.cpp built here replaced with --load-mode (common/arg.cpp): without this, every load
# ends in "llama-server process has terminated: ... invalid argument: --no-mmap".
server={server}
for arg do
    shift
    if [ "$arg" = --no-mmap ]; then set -- "$@" --load-mode none; else set -- "$@" "$arg"; fi
done
exec "$server" "$@"
"""
"""`lib/ollama/llama-server` of a llama-server release: the engine tier's binary, one flag
translated."""


def install_runner(root: Path, version: str = CURRENT) -> Path:
    """`lib/ollama/` of a llama-server release: the wrapper around the engine tier's
    `llama-server`, and its `llama-quantize` (which `ollama create` runs to validate a GGUF).
    Rewritten whenever it differs from what the engine's paths give, so a new llama.cpp or a
    moved cache is followed without a rebuild of Ollama."""
    lib = runner_dir(ollama_path(root, version))
    lib.mkdir(parents=True, exist_ok=True)
    server, quantize = engine.server_path(root), engine.server_path(root).with_name(QUANTIZE)
    wrapper = RUNNER_WRAPPER.format(version=version, server=shlex.quote(str(server)))
    script_path, link = lib / "llama-server", lib / QUANTIZE
    if not script_path.exists() or script_path.read_text() != wrapper:
        script_path.write_text(wrapper)
        script_path.chmod(0o755)
    if not link.is_symlink() or link.readlink() != quantize:
        link.unlink(missing_ok=True)
        link.symlink_to(quantize)
    return lib


def second_gguf(root: Path, first: Path) -> Path:
    """The same weights under another `general.name`, written by gguf-py's own
    gguf-new-metadata (installed in a scratch folder: the tests never import it)."""
    target = second_gguf_path(root)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        partial = Path(tmp, target.name)
        env = STEPS.scratch_packages(Path(tmp, "packages"), f"gguf=={GGUF_PY}")
        STEPS.run(
            sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--force",
            "--general-name", SECOND_NAME, first, partial, env=env,
        )  # fmt: skip
        partial.replace(target)
    return target


def embed_gguf_path(root: Path) -> Path:
    return root / f"gguf-embed-{GGUF_PY}" / "gemma-3-270m-embed.gguf"


def embed_gguf(root: Path, first: Path) -> Path:
    """The same weights with mean pooling declared: an embedding model to Ollama v0.30.0."""
    target = embed_gguf_path(root)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        partial = Path(tmp, target.name)
        env = STEPS.scratch_packages(Path(tmp, "packages"), f"gguf=={GGUF_PY}")
        script = Path(__file__).with_name("embedding_gguf.py")
        STEPS.run(sys.executable, script, first, partial, EMBED_NAME, env=env)
        partial.replace(target)
    return target


def ollama_js_path(root: Path) -> Path:
    """The `node_modules` folder that holds ollama-js (NODE_PATH for a script that needs it)."""
    return root / f"ollama-js-{OLLAMA_JS}" / "node_modules"


def ollama_js(root: Path) -> Path:
    """ollama-js installed from npm into its version's folder, as an app would install it."""
    modules = ollama_js_path(root)
    if (modules / "ollama" / "package.json").exists():
        return modules
    if shutil.which("npm") is None:
        raise SystemExit("ollama: npm not found: `make ollama` installs node and npm")
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        prefix = Path(tmp, modules.parent.name)
        STEPS.run(
            "npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "--no-save",
            f"ollama@{OLLAMA_JS}",
        )  # fmt: skip
        shutil.rmtree(modules.parent, ignore_errors=True)  # an interrupted install's leftovers
        prefix.rename(modules.parent)
    return modules


def paths(root: Path) -> dict[str, Path]:
    """The binaries, the three models and ollama-js, by the variable that names each for
    pytest."""
    return {
        OLLAMA_VAR: ollama_path(root),
        CURRENT_VAR: ollama_path(root, CURRENT),
        GGUF_VAR: engine.gguf_path(root),
        SECOND_VAR: second_gguf_path(root),
        EMBED_VAR: embed_gguf_path(root),
        JS_VAR: ollama_js_path(root),
    }


def provision(root: Path) -> None:
    vendor, first = engine.sources_dir(root) / "vendor", engine.gguf_path(root)
    server = engine.server_path(root)
    made = (vendor, first, server, server.with_name(QUANTIZE))
    if not all(path.exists() for path in made):
        # What tests/engine/provision.py makes, under its lock; not taken when there is nothing
        # to make, since a clone building llama-server holds it for half an hour.
        with locked(root, engine.LOCK):
            engine.unpack_sources(root)
            engine.assemble_gguf(root)
            engine.build_server(root, QUANTIZE)
    with locked(root, LOCK):
        build_ollama(root, vendor)
        build_ollama(root, vendor, CURRENT)
        install_runner(root, CURRENT)
        second_gguf(root, first)
        embed_gguf(root, first)
        ollama_js(root)


if __name__ == "__main__":
    sys.exit(script(__doc__, STEPS, paths, provision))

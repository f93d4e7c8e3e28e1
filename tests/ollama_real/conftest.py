"""The real-Ollama tier: Ollama itself, built from its Go module, two Gemma 3 270M models in it.

`make unit` builds or reuses Ollama (tests/ollama_real/provision.py) and names its binaries
(v0.24.0, the Go runner's era, and v0.30.0, llama-server's), the two GGUFs and ollama-js in
OLLAMA_TAP_TEST_OLLAMA, OLLAMA_TAP_TEST_OLLAMA_CURRENT, OLLAMA_TAP_TEST_GGUF,
OLLAMA_TAP_TEST_GGUF_SECOND and OLLAMA_TAP_TEST_OLLAMA_JS, and an embedding GGUF, imported
only where a test asks for it, in OLLAMA_TAP_TEST_GGUF_EMBED; with those set, a missing build
fails the tier. Run without them (a bare `pytest`), the tier is skipped, saying so.

`real_ollama` is v0.24.0 unless a test asks for both releases (`BOTH_RELEASES`): the whole
tier runs against the Go runner, the part that differs by era or proves the llama-server
runner works against v0.30.0 too, with the expectation of each release written beside it.

One `ollama serve` per release and session, on a free port of 127.0.0.1, its store
(OLLAMA_MODELS) and home in the session's temporary folder; the two models are imported into
it with `ollama create` from a Modelfile, as a user would. OLLAMA_MAX_LOADED_MODELS=1 so that
loading one model evicts the other, OLLAMA_NUM_PARALLEL=1 so that two requests to one model
queue.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
import pytest

from tests.conftest import MakeProxy, Proxy
from tests.ollama_real.provision import (
    CURRENT,
    CURRENT_VAR,
    EMBED_VAR,
    GGUF_VAR,
    JS_VAR,
    OLLAMA,
    OLLAMA_VAR,
    SECOND_VAR,
    runner_dir,
)
from tests.support.child_server import child_server
from tests.support.serve_process import ADMIN_TOKEN, free_port

# Read at import: the suite's isolation fixture clears every OLLAMA_TAP_* variable per test.
_GGUF, _SECOND, _JS = (os.environ.get(v) for v in (GGUF_VAR, SECOND_VAR, JS_VAR))
_EMBED: Final = os.environ.get(EMBED_VAR)
_BINARIES: Final = {OLLAMA: os.environ.get(OLLAMA_VAR), CURRENT: os.environ.get(CURRENT_VAR)}
_VARS: Final = {OLLAMA: OLLAMA_VAR, CURRENT: CURRENT_VAR}

MODEL: Final = "gemma3:270m"
"""The first model: the GGUF as assembled."""
SECOND: Final = "gemma3-second:270m"
"""The same weights in another blob (its `general.name` rewritten): a runner of its own."""
EMBEDDER: Final = "gemma3-embed:270m"
"""The same weights with mean pooling declared: an embedding model to v0.30.0 (imported only
by the tests that ask for it, `embedder`)."""
GREEDY: Final = {"temperature": 0, "seed": 7, "num_predict": 12}
"""Options that make a reply the same every time it is asked."""
AUTH: Final = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

BOTH_RELEASES: Final = pytest.mark.parametrize("real_ollama", [OLLAMA, CURRENT], indirect=True)
"""A test that runs against v0.24.0 and v0.30.0 (one session's `ollama serve` each)."""


@dataclass(frozen=True)
class Ollama:
    """A running `ollama serve`: its URL, binary, environment, log and release."""

    url: str
    binary: Path
    env: dict[str, str]
    log: Path
    version: str = OLLAMA

    @property
    def llama_server(self) -> bool:
        """Whether this release runs llama.cpp's llama-server (0.30.0 on), not the Go runner."""
        return self.version != OLLAMA

    def kept(self, c: int) -> int:
        """What a prompt cut at context C keeps: C on the Go runner (0.24), C − 1 on v0.30.0
        (llm/llama_server.go `completionPromptForRequest`: one token of headroom)."""
        return c - 1 if self.llama_server else c

    async def fresh_slot(self) -> None:
        """On v0.30.0, a runner with nothing cached: its `prompt_eval_count` is only the
        tokens llama-server did not find cached (`Timings.PromptN`, until v0.30.1), so a
        prompt sharing even its BOS with the previous one reports one token less than it
        kept. The Go runner counts the whole prompt either way."""
        if self.llama_server:
            await self.unload_all()

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The `ollama` command line against this server."""
        return subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    async def ps(self) -> list[dict[str, Any]]:
        reply = await call(self.url, "GET", "/api/ps")
        models: list[dict[str, Any]] = orjson.loads(reply.body)["models"]
        return models

    async def unload_all(self) -> None:
        """Every resident model unloaded (keep_alive 0), directly, and gone from /api/ps."""
        for row in await self.ps():
            await call(self.url, "POST", "/api/generate", {"model": row["name"], "keep_alive": 0})
        for _ in range(600):
            if not await self.ps():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"models still resident after 30 s: {await self.ps()}")


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    def lines(self) -> list[Any]:
        """An NDJSON stream's objects."""
        return [orjson.loads(line) for line in self.body.splitlines() if line.strip()]


async def call(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request on a fresh connection; the whole body read."""
    data = None if body is None else orjson.dumps(body)
    sent = {"Content-Type": "application/json", **(headers or {})} if data else headers
    timeout = aiohttp.ClientTimeout(total=300)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.request(method, base + path, data=data, headers=sent) as resp,
    ):
        return Reply(resp.status, dict(resp.headers), await resp.read())


def _paths(version: str = OLLAMA) -> tuple[Path, Path, Path]:
    """The binary of `version` and the two GGUFs; for v0.30.0 its runner folder too."""
    binary, var = _BINARIES[version], _VARS[version]
    if not (binary and _GGUF and _SECOND):
        pytest.skip(
            f"the real-Ollama tier needs {var}, {GGUF_VAR} and {SECOND_VAR}: `make unit "
            "ARGS=tests/ollama_real` builds Ollama (once) and sets them"
        )
    paths = Path(binary), Path(_GGUF), Path(_SECOND)
    needed = [*paths]
    if version != OLLAMA:
        lib = runner_dir(paths[0])
        needed += [lib / "llama-server", lib / "llama-quantize"]
    for path in needed:
        if not path.is_file():
            pytest.fail(f"{path} is missing: `make ollama` builds it ({var}, {SECOND_VAR})")
    return paths


@pytest.fixture(scope="session")
def ollama_js() -> Path:
    """The `node_modules` folder holding ollama-js (NODE_PATH for a script that requires it),
    with node on PATH; either missing fails the test, naming `make ollama`."""
    _paths()
    if not _JS or not Path(_JS, "ollama", "package.json").is_file():
        pytest.fail(f"ollama-js is missing ({JS_VAR}={_JS}): `make ollama` installs it")
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: `make ollama` installs it")
    return Path(_JS)


def _create(server: Ollama, name: str, gguf: Path, folder: Path) -> None:
    modelfile = folder / f"{name.replace(':', '-')}.Modelfile"
    modelfile.write_text(f"FROM {gguf}\n")
    done = server.cli("create", name, "-f", str(modelfile))
    if done.returncode != 0:
        pytest.fail(f"ollama create {name} failed: {done.stderr[-2000:]}")


@contextmanager
def ollama_serve(
    binary: Path, home: Path, *, version: str = OLLAMA, **settings: str
) -> Iterator[Ollama]:
    """`ollama serve` (the binary of release `version`) on a free port of 127.0.0.1 until the
    block ends, its key pair (~/.ollama), model store and log in `home`; `settings` are
    OLLAMA_* variables on top of the defaults (none but the host and the store: Ollama's
    own)."""
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "OLLAMA_HOST": f"127.0.0.1:{port}",
        "OLLAMA_MODELS": str(home / "models"),
        **settings,
    }
    url, log = f"http://127.0.0.1:{port}", home / "serve.log"
    with child_server("ollama serve", [str(binary), "serve"], url + "/api/version", log, env=env):
        yield Ollama(url, binary, env, log, version)


@pytest.fixture(scope="session", params=[OLLAMA])
def real_ollama(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ollama]:
    """One `ollama serve` per release for the session (v0.24.0 unless the test parametrises
    it, `BOTH_RELEASES`), both models imported. Two threads (the machine's cores), keep_alive
    5 m by default as Ollama ships, no pruning of blobs at start."""
    version: str = request.param
    binary, first, second = _paths(version)
    home = tmp_path_factory.mktemp(f"ollama-{version}")
    settings = {"OLLAMA_MAX_LOADED_MODELS": "1", "OLLAMA_NUM_PARALLEL": "1", "OLLAMA_NOPRUNE": "1"}
    if version != OLLAMA:
        # llama-server (which inherits Ollama's environment) is built with OpenMP, whose
        # threads spin while they wait: on a shared 2-core box one descheduled thread leaves
        # the other spinning, and Gemma 270M decoded 12 tokens in 5-8 s instead of 0.5-0.8 s.
        settings["OMP_WAIT_POLICY"] = "passive"
    with ollama_serve(binary, home, version=version, **settings) as server:
        _create(server, MODEL, first, home)
        _create(server, SECOND, second, home)
        yield server


@pytest.fixture(scope="session")
def embedder(real_ollama: Ollama, tmp_path_factory: pytest.TempPathFactory) -> str:
    """EMBEDDER imported into the session's Ollama (tests/ollama_real/embedding_gguf.py); a
    missing file fails the test, naming `make ollama`."""
    _paths(real_ollama.version)
    if not _EMBED or not Path(_EMBED).is_file():
        pytest.fail(f"the embedding GGUF is missing ({EMBED_VAR}={_EMBED}): `make ollama`")
    _create(real_ollama, EMBEDDER, Path(_EMBED), tmp_path_factory.mktemp("embedder"))
    return EMBEDDER


@pytest.fixture
async def tapped(proxy_factory: MakeProxy, real_ollama: Ollama) -> Proxy:
    """The proxy, in this process as in the rest of the suite, in front of the real Ollama."""
    return await proxy_factory(upstream=real_ollama.url)

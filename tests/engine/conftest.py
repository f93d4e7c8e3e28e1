"""The real-engine tier: llama.cpp's llama-server running Gemma 3 270M, the proxy in front.

`make unit` builds or reuses the engine (tests/engine/provision.py) and names its binary and
model in OLLAMA_TAP_TEST_LLAMA_SERVER and OLLAMA_TAP_TEST_GGUF; with those set, a missing
engine fails the tier. Run without them (a bare `pytest`), the tier is skipped, saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MakeProxy, Proxy
from tests.engine.provision import GGUF_VAR, SERVER_VAR
from tests.support.child_server import child_server
from tests.support.serve_process import free_port

# Read at import: the suite's isolation fixture clears every OLLAMA_TAP_* variable per test.
_SERVER, _GGUF = os.environ.get(SERVER_VAR), os.environ.get(GGUF_VAR)

CTX = 1024
"""The engine's context: small, so the KV cache is allocated and cleared in no time."""

MODEL = "gemma3"
"""What the requests name; llama-server serves its one model whatever they say."""


@dataclass(frozen=True)
class Engine:
    """A running llama-server: its base URL, the GGUF it serves and its log."""

    url: str
    gguf: Path
    log: Path

    async def get(self, path: str) -> Any:
        return await self._json("GET", path, None)

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        return await self._json("POST", path, body)

    async def _json(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        async with (
            aiohttp.ClientSession() as s,
            s.request(method, self.url + path, json=body) as resp,
        ):
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def metric(self, name: str) -> float:
        """One unlabelled sample of the engine's own /metrics (`llamacpp:...`)."""
        async with aiohttp.ClientSession() as s, s.get(self.url + "/metrics") as resp:
            text = await resp.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
        raise AssertionError(f"llama-server's /metrics has no {name}")


def _paths() -> tuple[Path, Path]:
    if not _SERVER or not _GGUF:
        pytest.skip(
            f"the real-engine tier needs {SERVER_VAR} and {GGUF_VAR}: `make unit "
            "ARGS=tests/engine` builds the engine (once: 15–40 min on 2 cores) and sets them"
        )
    server, gguf = Path(_SERVER), Path(_GGUF)
    for path in (server, gguf):
        if not path.is_file():
            pytest.fail(f"{path} is missing: `make engine` builds it ({SERVER_VAR}, {GGUF_VAR})")
    return server, gguf


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One llama-server for the session: 2 threads, one slot, greedy-friendly (no prompt
    cache, so a repeated request is computed the same way as the first), `--metrics` on.
    `--no-repack`: on a CPU with AMX (Xeon Sapphire Rapids and later) the native build
    repacks the weights for ggml's AMX kernels, and llama.cpp 11434's AMX matmul crashed
    (SIGSEGV in ggml_backend_amx_mul_mat) at the first decode; the plain CPU kernels serve."""
    server, gguf = _paths()
    port = free_port()
    log = tmp_path_factory.mktemp("engine") / "llama-server.log"
    command = [
        str(server), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", str(CTX),
        "-t", "2", "-tb", "2", "-np", "1", "--metrics", "--no-cache-prompt", "--no-webui",
        "--no-repack",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    # This llama-server is built with OpenMP, whose threads spin while they wait: on a shared
    # 2-core box they take the cores the proxy and the test need (as with Ollama 0.30's).
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    # /health answers 503 while the model loads, 200 once it serves.
    with child_server("llama-server", command, url + "/health", log, env=env, within=120, grace=10):
        yield Engine(url, gguf, log)


@pytest.fixture
async def tapped(proxy_factory: MakeProxy, engine: Engine) -> Proxy:
    """The proxy, in this process as in the rest of the suite, in front of the engine."""
    return await proxy_factory(upstream=engine.url)


def openai_client(base: str, http: Any = None) -> openai.AsyncOpenAI:
    """The official client as an app would make it, minus its retries: a 502 must show."""
    return openai.AsyncOpenAI(
        base_url=base + "/v1", api_key="none", max_retries=0, http_client=http
    )


def anthropic_client(base: str, http: Any = None) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base, api_key="none", max_retries=0, http_client=http)


async def proxy_metrics(proxy: Proxy) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The proxy's /metrics as scraped: (sample name, labels) → value."""
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(
    scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """A family's samples with these labels, summed over the others (the model label's
    spelling is the label-slot rules' business, not this tier's)."""
    wanted = labels.items()
    return sum(
        value for (sample, have), value in scraped.items() if sample == name and wanted <= have
    )


def events(body: bytes) -> list[Any]:
    """The JSON payloads of an SSE body, `[DONE]` left out."""
    found = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            found.append(orjson.loads(line[6:]))
    return found

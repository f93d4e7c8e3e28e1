"""Client names end to end: the official clients (ollama, openai, ollama-js) with and without
the header, CIDR and User-Agent rules; the `client` label, the record, the header forwarded."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import httpx
import ollama
import openai
import pytest
from structlog.testing import capture_logs

from tests.conftest import ROOT, MakeProxy, Proxy
from tests.ollama_real.provision import JS_VAR
from tests.support.fake_ollama import FakeOllama
from tests.support.metrics import LLAMA, counter, samples, settled
from tests.support.records import records

HEADER = "X-Ollama-Tap-Client"
GEN = {"endpoint": "/api/generate", "model": LLAMA}
# Read at import: the suite's isolation fixture clears every OLLAMA_TAP_* variable per test.
_JS = os.environ.get(JS_VAR)


def clients_seen(proxy: Proxy) -> dict[str, float]:
    return {
        labels["client"]: value
        for labels, value in samples(proxy, "ollama_tap_requests_total")
        if value
    }


def forwarded(fake: FakeOllama, name: str) -> list[str]:
    """The values of header `name` the fake received, in order, spelled as sent."""
    return [v for r in fake.received for k, v in r.headers if k.lower() == name.lower()]


async def test_ollama_python_by_user_agent_and_by_header(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    await ollama.AsyncClient(host=proxy.url).generate(LLAMA, "hi")
    named = ollama.AsyncClient(host=proxy.url, headers={HEADER: "notebook"})
    async for _ in await named.generate(LLAMA, "hi", stream=True):
        pass
    await settled(proxy)
    assert counter(proxy, "requests_total", **GEN, client="ollama-python", status="200") == 1
    assert counter(proxy, "requests_total", **GEN, client="notebook", status="200") == 1
    assert counter(proxy, "generation_tokens_total", **GEN, client="notebook") == 5
    assert counter(proxy, "prompt_tokens_total", **GEN, client="notebook") == 26
    assert forwarded(fake_ollama, HEADER) == ["notebook"], "the header reaches Ollama as sent"
    stored = await records(proxy, 2)
    assert sorted(r["client_name"] for r in stored) == ["notebook", "ollama-python"]
    only = await records(proxy, 1, client="notebook")
    assert [r["client_name"] for r in only] == ["notebook"]


async def test_openai_python_by_user_agent_and_by_header(proxy: Proxy) -> None:
    messages = [{"role": "user", "content": "hi"}]
    plain = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama")
    await plain.chat.completions.create(model=LLAMA, messages=messages)  # type: ignore[arg-type]
    named = openai.AsyncOpenAI(
        base_url=f"{proxy.url}/v1", api_key="ollama", default_headers={HEADER: "agent-7"}
    )
    stream = await named.chat.completions.create(
        model=LLAMA,
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    async for _ in stream:
        pass
    await settled(proxy)
    assert clients_seen(proxy) == {"openai-python": 1, "agent-7": 1}
    chat = {"endpoint": "/v1/chat/completions", "model": LLAMA, "client": "agent-7"}
    assert counter(proxy, "generation_tokens_total", **chat) == 5


async def test_cidr_and_user_agent_rules(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory(clients=("scripts=ua:ollama-python/*", "box=127.0.0.0/8"))
    await ollama.AsyncClient(host=proxy.url).generate(LLAMA, "hi")
    async with httpx.AsyncClient(base_url=proxy.url) as plain:
        await plain.get("/api/tags", headers={"User-Agent": "curl/8.5.0"})
    await ollama.AsyncClient(host=proxy.url, headers={HEADER: "own"}).generate(LLAMA, "hi")
    await settled(proxy)
    assert clients_seen(proxy) == {"scripts": 1, "box": 1, "own": 1}


async def test_a_thousand_random_header_values_make_a_bounded_client_label(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(client_label_cap=20)
    values = [os.urandom(6).hex() if i % 3 else f"n{i}" for i in range(1000)]
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        for value in values:
            await client.get("/api/version", headers={HEADER: value})
    await settled(proxy)
    seen = clients_seen(proxy)
    assert len(seen) == 21 and "other" in seen
    assert sum(seen.values()) == 1000
    assert forwarded(fake_ollama, HEADER)[-1000:] == values, "every value reached Ollama"


async def test_names_past_the_label_cap_stay_in_records_logs_and_filters(
    proxy_factory: MakeProxy,
) -> None:
    proxy = await proxy_factory(client_label_cap=2)
    with capture_logs() as logs:
        for name in ("w0", "w1", "w2"):
            await ollama.AsyncClient(host=proxy.url, headers={HEADER: name}).generate(LLAMA, "hi")
        await settled(proxy)
    assert clients_seen(proxy) == {"w0": 1, "w1": 1, "other": 1}, "only the label folds"
    only = await records(proxy, 1, client="w2")
    assert [r["client_name"] for r in only] == ["w2"]
    lines = [e for e in logs if e["event"] == "exchange"]
    assert [(e["client"], e["address"]) for e in lines] == [
        (n, "127.0.0.1") for n in ["w0", "w1", "w2"]
    ]


def _node_modules() -> Path:
    """ollama-js as `make ollama` installs it from npm into the test cache, with node."""
    if not _JS:
        pytest.skip(f"the ollama-js test needs {JS_VAR}: `make unit` installs it and sets it")
    if not Path(_JS, "ollama", "package.json").is_file():
        pytest.fail(f"ollama-js is missing ({JS_VAR}={_JS}): `make ollama` installs it")
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: `make ollama` installs it")
    return Path(_JS)


NODE_SCRIPT = """
const { Ollama } = require("ollama");
(async () => {
  const [host, name] = process.argv.slice(1);
  const headers = name ? { "X-Ollama-Tap-Client": name } : {};
  const client = new Ollama({ host, headers });
  const reply = await client.generate({ model: "llama3.2", prompt: "hi" });
  const parts = [];
  for await (const part of await client.generate({ model: "llama3.2", prompt: "hi", stream: true }))
    parts.push(part.response);
  console.log(JSON.stringify({ reply: reply.response, streamed: parts.join("") }));
})();
"""


async def test_ollama_js_by_user_agent_and_by_header(proxy: Proxy) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_PATH": str(_node_modules())}
    for name in ("", "web-ui"):
        # Not subprocess.run: the proxy answers on this test's event loop.
        node = await asyncio.create_subprocess_exec(
            "node", "-e", NODE_SCRIPT, proxy.url, name, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(node.communicate(), 60)
        assert node.returncode == 0, err.decode()
        assert json.loads(out) == {"reply": "The sky is blue.", "streamed": "The sky is blue."}
    await settled(proxy)
    assert clients_seen(proxy) == {"ollama-js": 2, "web-ui": 2}

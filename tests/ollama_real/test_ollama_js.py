"""ollama-js, the official JavaScript client, unchanged, through the proxy: every call gives
what it gives direct, and the proxy records each exchange under the client's own name.

The client is the `ollama` package from npm, installed by `make ollama` into the test cache
(tests/ollama_real/provision.py); ollama_js_client.cjs drives it as an app would (list, show,
a streamed chat, generate, ps, two refused calls and a stream the app abandons) and prints
what each call returned, less clocks and durations.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama
from tests.support.metrics import settled
from tests.support.records import records

SCRIPT = Path(__file__).with_name("ollama_js_client.cjs")
RECORDED = ["/api/chat", "/api/embed", "/api/generate", "/api/generate", "/api/show", "/api/show"]
"""What the script's exchanges leave as records: show, chat, generate, embed, the missing
model's show and the abandoned stream; not its polling GETs (version, list, ps), which the
proxy records only with --record-routes."""


async def run_client(modules: Path, host: str) -> Any:
    """The script's output against `host`; asynchronous, so the proxy in this process serves."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_PATH": str(modules)}
    proc = await asyncio.create_subprocess_exec(
        "node", str(SCRIPT), host, MODEL, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()
    return orjson.loads(out)


@BOTH_RELEASES
async def test_ollama_js_through_the_proxy_is_ollama_js_direct(
    tapped: Proxy, real_ollama: Ollama, ollama_js: Path
) -> None:
    """On v0.30.0 the script runs once more first: a chat's `prompt_eval_count` there is
    only what llama-server did not find in its prompt cache (26 on a fresh runner, 5 once
    cached), so the two compared runs must meet the same cache."""
    if real_ollama.llama_server:
        await run_client(ollama_js, real_ollama.url)
    direct = await run_client(ollama_js, real_ollama.url)
    proxied = await run_client(ollama_js, tapped.url)
    assert proxied == direct
    assert proxied["chat"][-1]["done"] is True and len(proxied["chat"]) > 2
    assert proxied["generate"]["response"] and MODEL in proxied["ps"]
    # Neither release embeds with this Gemma: 0.24's Go engine has no pooling for it, and
    # 0.30.0 starts llama-server without `--embedding` (no `gemma3.pooling_type` in the
    # GGUF), which answers 501 itself, relayed by Ollama.
    assert proxied["embed"]["status_code"] == 501
    if real_ollama.llama_server:
        assert proxied["embed"]["error"].startswith("This server does not support embeddings")
    assert proxied["missing"]["status_code"] == 404
    assert proxied["abandoned"]["name"] == "AbortError"

    await settled(tapped)
    found = await records(tapped, len(RECORDED))
    assert {r["client_name"] for r in found} == {"ollama-js"}
    assert sorted(r["path"] for r in found) == RECORDED
    [chat] = [r for r in found if r["path"] == "/api/chat"]
    final = proxied["chat"][-1]
    assert (chat["eval_tokens"], chat["prompt_tokens"]) == (
        final["eval_count"],
        final["prompt_eval_count"],
    )
    assert chat["outcome"] == "ok" and chat["done_reason"] == final["done_reason"]
    generated = sorted(r["outcome"] for r in found if r["path"] == "/api/generate")
    assert generated == ["client_disconnected", "ok"]

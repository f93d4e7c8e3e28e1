"""`ollama-tap replay serve` as a real subprocess: it serves, and refuses what it cannot."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import ollama
import openai

from tests.conftest import MakeProxy, Proxy
from tests.support.records import records
from tests.support.serve_process import free_port


async def _run(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ollama_tap", "replay", *argv,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_serve_answers_the_official_client(proxy: Proxy) -> None:
    recorded = await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    port = free_port()
    proc = await _run("serve", "--db", str(proxy.settings.db_path), "--port", str(port))
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                try:
                    async with s.get(f"{url}/api/version") as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        replayed = await ollama.AsyncClient(host=url).generate("llama3.2", "hi")
        assert replayed == recorded
        tags = await ollama.AsyncClient(host=url).list()
        assert [m.model for m in tags.models] == ["llama3.2:latest"]
        oai = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="ollama")
        assert [m.id async for m in oai.models.list()] == ["llama3.2:latest"]
        await oai.close()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_serve_refuses_a_metadata_only_database(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory(record="metadata")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    proc = await _run("serve", "--db", str(proxy.settings.db_path), "--port", str(free_port()))
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert b"1 were recorded in metadata mode" in err and b"--record full" in err

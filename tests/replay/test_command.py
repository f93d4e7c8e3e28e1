"""`ollama-tap replay serve` as a real subprocess: it serves, and refuses what it cannot."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import aiohttp
import ollama
import openai
import pytest

from ollama_tap.cli import build_parser
from tests.conftest import MakeProxy, Proxy
from tests.support.records import records
from tests.support.serve_process import ADMIN_TOKEN, free_port


async def _run(*argv: str, token: str | None = None) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k != "OLLAMA_TAP_ADMIN_TOKEN"}
    if token is not None:
        env["OLLAMA_TAP_ADMIN_TOKEN"] = token
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ollama_tap", "replay", *argv,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip


async def _ready(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(f"{url}/api/version") as resp:
                    assert resp.status == 200
                    return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)


async def test_serve_answers_the_official_client_with_the_admin_token(proxy: Proxy) -> None:
    recorded = await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    port = free_port()
    db = str(proxy.settings.db_path)
    proc = await _run("serve", "--db", db, "--port", str(port), token=ADMIN_TOKEN)
    url = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    try:
        await _ready(url)
        with pytest.raises(ollama.ResponseError) as refused:
            await ollama.AsyncClient(host=url).generate("llama3.2", "hi")
        assert refused.value.status_code == 401 and "admin token" in refused.value.error
        replayed = await ollama.AsyncClient(host=url, headers=bearer).generate("llama3.2", "hi")
        assert replayed == recorded
        tags = await ollama.AsyncClient(host=url, headers=bearer).list()
        assert [m.model for m in tags.models] == ["llama3.2:latest"]
        oai = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=ADMIN_TOKEN)
        assert [m.id async for m in oai.models.list()] == ["llama3.2:latest"]
        await oai.close()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_serve_keeps_a_token_beside_the_database_and_no_token_is_loopback_only(
    proxy: Proxy,
) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    db, port = proxy.settings.db_path, free_port()
    proc = await _run("serve", "--db", str(db), "--port", str(port))
    url = f"http://127.0.0.1:{port}"
    try:
        await _ready(url)
        token = (db.parent / "admin-token").read_text().strip()
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/api/tags") as resp:
                assert resp.status == 401
            async with s.get(f"{url}/api/tags", headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 200
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert str(db.parent / "admin-token").encode() in err and token.encode() not in err
    proc = await _run("serve", "--db", str(db), "--host", "0.0.0.0", "--no-token")
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert err.count(b"\n") == 1 and b"--no-token is allowed on loopback binds only" in err


async def test_a_non_loopback_bind_warns_that_it_is_in_clear(proxy: Proxy) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    port = free_port()
    proc = await _run(
        "serve", "--db", str(proxy.settings.db_path), "--host", "0.0.0.0", "--port", str(port),
        token=ADMIN_TOKEN,
    )  # fmt: skip
    try:
        await _ready(f"http://127.0.0.1:{port}")
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/api/tags") as resp:
                assert resp.status == 401
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert b"WARNING: plain HTTP on a non-loopback address" in err


async def test_serve_refuses_a_metadata_only_database(proxy_factory: MakeProxy) -> None:
    proxy = await proxy_factory(record="metadata")
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    proc = await _run("serve", "--db", str(proxy.settings.db_path), "--port", str(free_port()))
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert b"1 were recorded in metadata mode" in err and b"--record full" in err


def test_serve_defaults_to_a_port_that_is_not_ollamas() -> None:
    args = build_parser().parse_args(["replay", "serve"])
    assert args.port == 11436 != 11434


async def test_a_busy_port_is_one_line_naming_the_holder_and_the_fix(proxy: Proxy) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = await _run("serve", "--db", str(proxy.settings.db_path), "--port", str(port))
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    [line] = err.decode().splitlines()
    assert line.startswith(
        f"ollama-tap replay serve: 127.0.0.1:{port} is in use by pid {os.getpid()}"
    )
    assert line.endswith("listen elsewhere with --port")


async def test_the_banner_says_the_port_and_what_matching_normalises(proxy: Proxy) -> None:
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await records(proxy, 1)
    proc = await _run("serve", "--db", str(proxy.settings.db_path), "--port", str(free_port()))
    try:
        banner = [(await asyncio.wait_for(proc.stderr.readline(), 30)).decode() for _ in range(2)]
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert "serving 1 recordings" in banner[0]
    assert "keep_alive and stream_options ignored, a field at null, [] or {} as absent" in banner[1]

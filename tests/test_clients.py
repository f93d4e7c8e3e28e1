"""The official `ollama` and `openai` clients work through the proxy unchanged."""

from __future__ import annotations

import hashlib

import ollama
import openai
import pytest

from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama, Script


@pytest.fixture
def client(proxy: Proxy) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=proxy.url)


async def test_generate_streaming_and_not(client: ollama.AsyncClient) -> None:
    pieces = [part.response async for part in await client.generate("llama3.2", "hi", stream=True)]
    assert "".join(pieces) == "The sky is blue."
    reply = await client.generate("llama3.2", "hi")
    assert reply.response == "The sky is blue."
    assert reply.done and reply.eval_count == 5 and reply.context


async def test_chat_streaming_and_not(client: ollama.AsyncClient) -> None:
    messages = [{"role": "user", "content": "hi"}]
    stream = await client.chat("llama3.2", messages=messages, stream=True)
    text = "".join([part.message.content or "" async for part in stream])
    assert text == "The sky is blue."
    reply = await client.chat("llama3.2", messages=messages)
    assert reply.message.content == "The sky is blue."


async def test_errors_surface_as_in_a_direct_connection(
    client: ollama.AsyncClient, fake_ollama: FakeOllama
) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        await client.generate("no-such-model", "hi")
    assert missing.value.status_code == 404
    fake_ollama.script = Script(error_after=2)
    with pytest.raises(ollama.ResponseError, match="an error was encountered"):
        async for _ in await client.generate("llama3.2", "hi", stream=True):
            pass


async def test_embed_list_show_pull(client: ollama.AsyncClient) -> None:
    embedded = await client.embed("all-minilm", ["a", "b"])
    assert len(embedded.embeddings) == 2
    names = [m.model for m in (await client.list()).models]
    assert "llama3.2:latest" in names
    shown = await client.show("llama3.2")
    assert shown.details is not None and shown.details.family
    statuses = [p.status async for p in await client.pull("llama3.2", stream=True)]
    assert statuses[-1] == "success"


async def test_blob_upload(
    client: ollama.AsyncClient, tmp_path: object, fake_ollama: FakeOllama
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "blob.bin"
    data = bytes(range(256)) * 40_000
    path.write_bytes(data)
    digest = await client.create_blob(path)
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert fake_ollama.blobs[digest] == data
    # Uploading again meets Ollama's early answer (200 before the body is read).
    assert await client.create_blob(path) == digest


async def test_openai_chat_streaming_with_usage(proxy: Proxy) -> None:
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="ollama")
    stream = await client.chat.completions.create(
        model="llama3.2",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text == "The sky is blue."
    assert usage is not None and usage.completion_tokens == 5
    reply = await client.chat.completions.create(
        model="llama3.2", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "The sky is blue."
    await client.close()


async def test_early_answer_for_a_known_blob_mid_upload(
    proxy: Proxy, fake_ollama: FakeOllama
) -> None:
    import aiohttp

    data = b"x" * (20 * 1024 * 1024)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    fake_ollama.blobs[digest] = data

    async def slow_body() -> object:
        for i in range(0, len(data), 1 << 20):
            yield data[i : i + (1 << 20)]

    async with aiohttp.ClientSession() as s:
        for base in (fake_ollama.url, proxy.url):
            async with s.post(f"{base}/api/blobs/{digest}", data=slow_body()) as resp:
                assert resp.status == 200, base
        async with s.get(proxy.url + "/api/version") as resp:
            assert resp.status == 200

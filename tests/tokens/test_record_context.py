"""A recorded `context` read back as text through the API and the CLI, end to end: the
official client, the real proxy, and a real vocabulary served by the fake upstream."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import ollama
import orjson
import pytest
from blockbuster import blockbuster_ctx

from ollama_tap.app import LOADS, POLLER
from ollama_tap.cli import main
from ollama_tap.tokens.gguf import read_metadata
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import AUTH, records
from tests.support.serve_process import free_port
from tests.support.vocab_vectors import vocab_cases
from tests.support.waiting import eventually

MODEL = "llama3.2:latest"
Vectors = tuple[str, list[int]]


@pytest.fixture
def served(vocab_dir: Path, fake_ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> Vectors:
    """The fake's llama3.2 has the real gpt-2 vocabulary, and its generate replies carry the
    ids of every gpt-2 test string: the expected text is those strings joined."""
    kv = read_metadata(vocab_dir / "ggml-vocab-gpt-2.gguf").kv
    # Ollama leaves these two out of model_info.
    info = {k: v for k, v in kv.items() if k not in {"general.name", "tokenizer.chat_template"}}
    fake_ollama.models[MODEL].model_info = info
    cases = vocab_cases(vocab_dir, "gpt-2")
    fake_ollama.script.context = [i for _, ids in cases for i in ids]
    # No local model store: the vocabulary must come through the upstream's /api/show.
    monkeypatch.setenv("OLLAMA_MODELS", str(vocab_dir / "no-such-store"))
    return "".join(text for text, _ in cases), fake_ollama.script.context


async def start(proxy_factory: MakeProxy, fake_ollama: FakeOllama, **settings: Any) -> Proxy:
    """A proxy that already knows the model's digest, so records carry it."""
    proxy = await proxy_factory(**settings)
    for _ in range(100):
        if proxy.app[POLLER].digest_of(MODEL):
            return proxy
        await asyncio.sleep(0.05)
    raise AssertionError("the poller never learned the model's digest")


async def generated(proxy_factory: MakeProxy, fake_ollama: FakeOllama, **settings: Any) -> Proxy:
    """A proxy that has recorded one plain generate, whose reply carries the context ids,
    and reported its load: the load tracker logs it from its next /api/ps read, which would
    otherwise land in the middle of a CLI run's captured output."""
    proxy = await start(proxy_factory, fake_ollama, **settings)
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    await eventually(lambda: proxy.app[LOADS].recent())
    return proxy


async def api_record(proxy: Proxy, query: str = "") -> dict[str, Any]:
    [summary] = await records(proxy, 1)
    url = f"{proxy.url}/_tap/api/records/{summary['id']}{query}"
    # No blocking I/O of the read side on the event loop (the database, a GGUF, a blob).
    with blockbuster_ctx(["ollama_tap.tokens", "ollama_tap.recorder"]):
        async with aiohttp.ClientSession(headers=AUTH) as s, s.get(url) as resp:
            assert resp.status == 200, await resp.text()
            record: dict[str, Any] = await resp.json()
    return record


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it runs its own event loop) and capture what it printed."""
    capsys.readouterr()  # leave out the proxy's own log lines
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def show_requests(fake_ollama: FakeOllama) -> int:
    """How many verbose /api/show requests (vocabulary loads) the upstream received."""
    bodies = [orjson.loads(r.body) for r in fake_ollama.received if r.path_qs == "/api/show"]
    return sum(1 for b in bodies if b.get("verbose") is True)


async def test_generate_context_reads_back_as_text(
    served: Vectors,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text, ids = served
    proxy = await start(proxy_factory, fake_ollama)
    reply = await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi")
    assert reply.context == ids

    record = await api_record(proxy, "?tokens=1")
    decoded = record["decoded_context"]
    assert decoded["text"] == text
    assert (decoded["reason"], decoded["unavailable"]) == (None, None)
    assert decoded["ids_count"] == len(ids)
    assert (decoded["model"], decoded["digest"]) == (MODEL, fake_ollama.models[MODEL].digest)
    assert decoded["vocabulary"] == f"{fake_ollama.url}/api/show"
    assert [t["id"] for t in decoded["tokens"]] == ids
    assert record["context"] == ids  # the stored ids are still there, as exported
    again = await api_record(proxy)
    assert again["decoded_context"]["text"] == text
    assert "tokens" not in again["decoded_context"]
    assert show_requests(fake_ollama) == 1  # cached by digest

    db, url = str(proxy.settings.db_path), fake_ollama.url
    code, out, _ = await cli(capsys, "records", "show", record["id"], "--db", db, "--url", url)
    assert code == 0
    heading = f"[context] {len(ids)} token ids, decoded with the vocabulary of {MODEL} (sha256:"
    assert f"{heading}{fake_ollama.models[MODEL].digest[:12]}) from {url}/api/show\n{text}" in out

    code, out, _ = await cli(capsys, "decode", "--record", record["id"], "--db", db, "--url", url)
    assert (code, out) == (0, text + ("" if text.endswith("\n") else "\n"))
    argv = ("decode", "--record", record["id"], "--db", db, "--url", url, "--json", "--tokens")
    code, out, _ = await cli(capsys, *argv)
    doc = orjson.loads(out)
    assert (code, doc["text"], doc["model"]) == (0, text, "gpt2")
    assert [t["id"] for t in doc["tokens"]] == ids


_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


async def test_upstream_down_is_said_not_a_crash(
    served: Vectors,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy = await generated(proxy_factory, fake_ollama)
    [summary] = await records(proxy, 1)
    db, down = str(proxy.settings.db_path), closed_port_url()
    code, out, _ = await cli(capsys, "records", "show", summary["id"], "--db", db, "--url", down)
    assert code == 0
    assert f"[context] {len(served[1])} token ids; not decoded: cannot reach Ollama at" in out
    code, out, err = await cli(capsys, "decode", "--record", summary["id"], "--db", db,
                               "--url", down)  # fmt: skip
    # Nothing on stdout but the in-process proxy's own log lines (its poller may log meanwhile).
    assert code == 1 and [line for line in out.splitlines() if not _LOG.match(line)] == []
    assert "ollama-tap decode: cannot reach Ollama at" in err and "pass --url" in err


async def test_metadata_mode_keeps_only_the_count(
    served: Vectors,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy = await generated(proxy_factory, fake_ollama, record="metadata")
    record = await api_record(proxy)
    decoded = record["decoded_context"]
    assert (decoded["reason"], decoded["text"], decoded["ids_count"]) == (
        "privacy", None, len(served[1]),
    )  # fmt: skip
    assert "keeps only the number of context ids" in decoded["unavailable"]
    db = str(proxy.settings.db_path)
    code, out, err = await cli(capsys, "decode", "--record", record["id"], "--db", db)
    assert (code, out) == (1, "")
    assert "has no context ids: the metadata privacy mode keeps only the number" in err
    code, out, _ = await cli(capsys, "records", "show", record["id"], "--db", db)
    assert code == 0
    assert f"[context] {len(served[1])} token ids; not decoded: the metadata privacy" in out
    assert show_requests(fake_ollama) == 0


async def test_chat_record_says_the_route_has_no_context(
    served: Vectors,
    proxy_factory: MakeProxy,
    fake_ollama: FakeOllama,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy = await start(proxy_factory, fake_ollama)
    await ollama.AsyncClient(host=proxy.url).chat(
        "llama3.2", messages=[{"role": "user", "content": "hi"}]
    )
    record = await api_record(proxy)
    decoded = record["decoded_context"]
    assert (decoded["reason"], decoded["text"], decoded["ids_count"]) == ("route", None, None)
    assert decoded["unavailable"].startswith("/api/chat replies carry no context")
    code, out, _ = await cli(capsys, "records", "show", record["id"], "--db",
                             str(proxy.settings.db_path))  # fmt: skip
    assert code == 0
    assert "[context] not decoded: /api/chat replies carry no context" in out


async def test_raw_generate_says_raw(
    served: Vectors, proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await start(proxy_factory, fake_ollama)
    await ollama.AsyncClient(host=proxy.url).generate("llama3.2", "hi", raw=True)
    decoded = (await api_record(proxy))["decoded_context"]
    assert (decoded["reason"], decoded["text"]) == ("raw", None)


async def test_a_newer_version_upstream_is_not_used(
    served: Vectors, proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await generated(proxy_factory, fake_ollama)
    recorded = fake_ollama.models[MODEL].digest
    fake_ollama.models[MODEL].digest = "f" * 64  # `ollama pull` brought a new version
    decoded = (await api_record(proxy))["decoded_context"]
    assert (decoded["reason"], decoded["text"], decoded["digest"]) == (
        "no_vocabulary", None, recorded,
    )  # fmt: skip
    assert (
        "now has another version of 'llama3.2:latest' (sha256:ffffffffffff"
        in (decoded["unavailable"])
    )
    assert show_requests(fake_ollama) == 0

"""The reload guard (`--reload-guard`): what it rewrites, the bytes it changes, and a smaller
num_ctx that reloads nothing on the fake Ollama's scheduler (one model resident at a time)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from ollama_tap.app import LOADS
from ollama_tap.guard import ReloadGuard
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.options import Change
from tests.conftest import MakeProxy, Proxy
from tests.support.exchanges import new_exchange
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.fake_ollama.server import FakeOllama
from tests.support.records import records

LLAMA = "llama3.2:latest"


class Resident:
    """The load tracker as the guard asks it: a fixed prediction."""

    def __init__(self, *changes: Change) -> None:
        self.changes = list(changes)
        self.asked: list[tuple[str, dict[str, Any] | None]] = []

    def reload_for(self, model: str, options: dict[str, Any] | None, body: bytes) -> list[Change]:
        self.asked.append((model, options))
        return self.changes


def guarded(body: bytes, *changes: Change, endpoint: str = "/api/chat") -> tuple[bytes, Any]:
    guard = ReloadGuard(Resident(*changes), CollectorRegistry(), ModelLabels(10))
    ex = new_exchange(endpoint)
    return guard.rewrite(ex, body), ex.reload_guard


SMALLER = Change("num_ctx", 8192, 4096)


def test_a_smaller_num_ctx_changes_the_bytes_of_its_value_and_no_other() -> None:
    body = b'{ "model":"llama3.2",\n  "options": {"temperature":0.70, "num_ctx" :\t4096 },"x":1e3}'
    sent, fact = guarded(body, SMALLER)
    assert sent == body.replace(b"4096", b"8192")
    assert fact.as_json() == {
        "model": "llama3.2",
        "changes": [{"field": "num_ctx", "from": 4096, "to": 8192}],
    }


def test_num_batch_and_num_thread_go_with_num_ctx() -> None:
    body = b'{"model":"m","options":{"num_ctx":2048,"num_batch":128,"num_thread":4}}'
    changes = (Change("num_ctx", 4096, 2048), Change("num_batch", 512, 128),
               Change("num_thread", 8, 4))  # fmt: skip
    sent, fact = guarded(body, *changes)
    assert orjson.loads(sent)["options"] == {"num_ctx": 4096, "num_batch": 512, "num_thread": 8}
    assert [c["field"] for c in fact.as_json()["changes"]] == ["num_ctx", "num_batch", "num_thread"]


@pytest.mark.parametrize(
    ("body", "changes"),
    [
        # A larger context is what the client needs: Ollama reloads.
        (b'{"model":"m","options":{"num_ctx":16384}}', [Change("num_ctx", 8192, 16384)]),
        # Another field reloads anyway: the rewrite would spare nothing.
        (
            b'{"model":"m","options":{"num_ctx":4096,"num_gpu":0}}',
            [SMALLER, Change("num_gpu", 99, 0)],
        ),
        # Never a field the guard does not know (where the weights live).
        (b'{"model":"m","options":{"num_gpu":0}}', [Change("num_gpu", None, 0)]),
        # The runner's value is unknown ("auto"): nothing to set it to.
        (b'{"model":"m","options":{"num_batch":128}}', [Change("num_batch", None, 128)]),
        # An unset num_ctx back to the automatic one is not given a value.
        (b'{"model":"m","options":{}}', [Change("num_ctx", 8192, 4096)]),
        # No reload predicted: nothing to spare.
        (b'{"model":"m","options":{"num_ctx":4096}}', []),
        # Not one JSON object, or no options.
        (b'{"model":"m","options":{"num_ctx":4096}', [SMALLER]),
        (b'[{"model":"m"}]', [SMALLER]),
        (b'{"model":"m"}', [SMALLER]),
    ],
)
def test_anything_else_goes_as_it_came(body: bytes, changes: list[Change]) -> None:
    sent, fact = guarded(body, *changes)
    assert sent is body and fact is None


def test_a_value_it_cannot_place_for_sure_is_left_alone() -> None:
    # The key spelled with an escape: the only `"num_ctx"` in the bytes is inside a prompt.
    body = (
        b'{"model":"m","prompt":"\\"num_ctx\\": 4096 \\"num_ctx\\"",'
        b'"options":{"num\\u005fctx":4096}}'
    )
    sent, fact = guarded(body, SMALLER)
    assert sent is body and fact is None


def test_the_last_of_duplicate_keys_is_the_one_changed_as_go_reads_it() -> None:
    body = b'{"model":"m","options":{"num_ctx":2048,"num_ctx":4096}}'
    sent, _ = guarded(body, SMALLER)
    assert sent == b'{"model":"m","options":{"num_ctx":2048,"num_ctx":8192}}'


# --- Through the proxy, on the fake's scheduler: one model resident at a time.


async def chat(proxy: Proxy, num_ctx: int, app: str = "notebook") -> dict[str, Any]:
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "stream": False,
            "options": {"num_ctx": num_ctx}}  # fmt: skip
    headers = {"X-Ollama-Tap-Client": app}
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{proxy.url}/api/chat", json=body, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        reply: dict[str, Any] = await resp.json()
        return reply


def sent_up(fake: FakeOllama) -> Any:
    """The last inference request the fake received (the poller's GETs come between)."""
    return [r for r in fake.received if r.method == "POST"][-1]


async def loaded_at(proxy: Proxy, fake: FakeOllama, num_ctx: int, prepare: float = 0.0) -> None:
    fake.scheduler = Scheduler(fake, max_loaded=1, prepare_seconds=prepare)
    await chat(proxy, num_ctx, app="first")
    assert fake.scheduler.loads == [LLAMA]


async def test_a_smaller_num_ctx_is_sent_as_the_resident_one_and_nothing_reloads(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(reload_guard=True)
    # Each reply's load_duration over a second, as Ollama's handler reads the model on a
    # loaded machine: the one on the runner it keeps is no load all the same.
    await loaded_at(proxy, fake_ollama, 8192, prepare=1.1)
    with capture_logs() as logs:
        await chat(proxy, 4096)

    assert fake_ollama.scheduler is not None and fake_ollama.scheduler.loads == [LLAMA]
    assert [e["cause"] for e in proxy.app[LOADS].recent(LLAMA)] == ["first_load"]
    sent = sent_up(fake_ollama)
    assert orjson.loads(sent.body)["options"] == {"num_ctx": 8192}
    assert dict((k.lower(), v) for k, v in sent.headers)["content-length"] == str(len(sent.body))
    [line] = [e for e in logs if e["event"] == "reload_guard_rewrite"]
    assert (line["model"], line["client"], line["changes"]) == (
        LLAMA, "notebook", ["num_ctx 4096 → 8192"],
    )  # fmt: skip
    assert proxy.sample("ollama_tap_reload_guard_rewrites_total", {"model": LLAMA}) == 1
    assert (
        proxy.sample("ollama_tap_reload_predicted_total", {"model": LLAMA, "field": "num_ctx"})
        is None
    )
    newest = (await records(proxy, 2))[0]
    assert newest["reload_guard"] == {
        "model": LLAMA, "changes": [{"field": "num_ctx", "from": 4096, "to": 8192}],
    }  # fmt: skip
    assert newest["client_name"] == "notebook" and newest["load_event"] is None


async def test_a_larger_num_ctx_is_never_rewritten(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(reload_guard=True)
    await loaded_at(proxy, fake_ollama, 4096)
    await chat(proxy, 8192)

    assert fake_ollama.scheduler is not None and fake_ollama.scheduler.loads == [LLAMA, LLAMA]
    assert orjson.loads(sent_up(fake_ollama).body)["options"] == {"num_ctx": 8192}
    assert proxy.sample("ollama_tap_reload_guard_rewrites_total", {"model": LLAMA}) is None
    assert (await records(proxy, 2))[0]["reload_guard"] is None


async def test_off_by_default_the_body_goes_byte_for_byte(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory()
    await loaded_at(proxy, fake_ollama, 8192)
    body = b'{"model": "llama3.2",  "options":{"num_ctx":4096}, "stream":false,"prompt":"hi"}'
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{proxy.url}/api/generate", data=body) as resp,
    ):
        assert resp.status == 200
    assert sent_up(fake_ollama).body == body
    assert fake_ollama.scheduler is not None and fake_ollama.scheduler.loads == [LLAMA, LLAMA]
    assert proxy.sample("ollama_tap_reload_guard_rewrites_total", {"model": LLAMA}) is None


def raw_exchange(port: int, *pieces: bytes) -> bytes:
    """One HTTP/1.1 request written as given, in pieces a moment apart (a body that streams
    in), the reply read to its close."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(0.05)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def chunked(*parts: bytes) -> list[bytes]:
    """A POST /api/generate with a chunked body: its head, each chunk, the last chunk."""
    head = (
        b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    return [head, *(b"%x\r\n%b\r\n" % (len(p), p) for p in parts), b"0\r\n\r\n"]


async def test_a_chunked_body_is_read_whole_and_sent_with_its_length(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(reload_guard=True)
    await loaded_at(proxy, fake_ollama, 8192)
    body = b'{"model":"llama3.2","prompt":"hi","stream":false,"options":{"num_ctx":2048}}'
    reply = await asyncio.to_thread(raw_exchange, proxy.port, *chunked(body[:20], body[20:]))
    assert reply.startswith(b"HTTP/1.1 200")
    sent = sent_up(fake_ollama)
    assert sent.body == body.replace(b"2048", b"8192")
    headers = {k.lower(): v for k, v in sent.headers}
    assert headers["content-length"] == str(len(sent.body)) and "transfer-encoding" not in headers
    assert fake_ollama.scheduler is not None and fake_ollama.scheduler.loads == [LLAMA]


async def test_a_body_past_the_tee_limit_streams_on_as_it_came(
    proxy_factory: MakeProxy, fake_ollama: FakeOllama
) -> None:
    proxy = await proxy_factory(reload_guard=True, body_tee_limit=64)
    await loaded_at(proxy, fake_ollama, 8192)
    body = b'{"model":"llama3.2","prompt":"' + b"x" * 200 + b'","stream":false,'
    body += b'"options":{"num_ctx":2048}}'
    parts = chunked(body[:50], body[50:120], body[120:])
    reply = await asyncio.to_thread(raw_exchange, proxy.port, *parts)
    assert reply.startswith(b"HTTP/1.1 200")
    assert sent_up(fake_ollama).body == body
    assert proxy.sample("ollama_tap_reload_guard_rewrites_total", {"model": LLAMA}) is None

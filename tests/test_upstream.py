"""The upstream poller against a tiny fake Ollama whose /api/* answers the tests change."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from ollama_tap.config import Settings
from ollama_tap.exchange import Outcome, Usage
from ollama_tap.loads.tracker import LoadTracker
from ollama_tap.metrics.observer import MetricsObserver
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.names import model_key
from ollama_tap.upstream import UpstreamPoller
from tests.support.exchanges import new_exchange

DIGEST_A, DIGEST_B, DIGEST_A2 = "a" * 64, "b" * 64, "c" * 64


def tag(name: str, digest: str, family: str = "llama") -> dict[str, Any]:
    details = {"family": family, "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}
    return {"name": name, "model": name, "digest": digest, "size": 2_000, "details": details}


def ps_entry(name: str, digest: str, ctx: int = 4096, vram: int = 1_500) -> dict[str, Any]:
    return {**tag(name, digest), "size": 2_000, "size_vram": vram, "context_length": ctx}


class FakeOllama:
    """State the tests edit, served as Ollama would; `hits` counts requests per path."""

    def __init__(self) -> None:
        self.version = "0.33.0"
        self.tags: list[Any] = [
            tag("llama3.2:latest", DIGEST_A),
            tag("qwen3:8b", DIGEST_B, "qwen3"),
        ]
        self.ps: Any = [ps_entry("llama3.2:latest", DIGEST_A)]
        self.failing = False
        self.hits: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/version", self._json(lambda: {"version": self.version}))
        app.router.add_get("/api/tags", self._json(lambda: {"models": self.tags}))
        app.router.add_get("/api/ps", self._json(lambda: {"models": self.ps}))
        app.router.add_post("/api/show", self._dispatch_show)
        return app

    def _json(self, body: Callable[[], Any]) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            self.hits[request.path] += 1
            if self.failing:
                return web.json_response({"error": "boom"}, status=500)
            return web.json_response(body())

        return handle

    async def _dispatch_show(self, request: web.Request) -> web.Response:
        return await self._show(request)  # looked up per request: a test may replace it

    async def _show(self, request: web.Request) -> web.Response:
        name = (await request.json())["model"]
        self.hits[f"/api/show {name}"] += 1
        entry = next((t for t in self.tags if t["name"] == name), None)
        if entry is None:
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        return web.json_response({"details": entry["details"], "model_info": {}})


@pytest.fixture
def fake() -> FakeOllama:
    return FakeOllama()


@pytest.fixture
async def server(fake: FakeOllama, aiohttp_server: Any) -> TestServer:
    srv: TestServer = await aiohttp_server(fake.app())
    return srv


class Rig:
    def __init__(self, upstream: str, session: aiohttp.ClientSession) -> None:
        self.registry = CollectorRegistry()
        self.labels = ModelLabels(10)
        settings = Settings.model_validate({"upstream": upstream, "poll_interval": 0.05})
        self.poller = UpstreamPoller(settings, self.registry, self.labels, session=session)
        # Loads are counted, with their cause, by the load tracker the app plugs in.
        self.loads = LoadTracker(self.registry, self.labels, self.poller)
        self.poller.on_ps(self.loads.ps)

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(f"ollama_tap_{name}", labels)

    async def settle(self) -> None:
        """Wait for the reads the poller scheduled (poke_ps, refresh_tags)."""
        await asyncio.gather(*self.poller._pending.values())


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def rig(server: TestServer, session: aiohttp.ClientSession) -> Rig:
    return Rig(str(server.make_url("")), session)


async def test_first_poll_sets_upstream_and_model_gauges(rig: Rig) -> None:
    await rig.poller.poll()
    assert rig.poller.up
    assert rig.value("upstream_up") == 1
    assert rig.value("upstream_info", version="0.33.0") == 1
    llama = {"model": "llama3.2:latest"}
    assert rig.value("model_loaded", **llama) == 1
    assert rig.value("model_vram_bytes", **llama) == 1_500
    assert rig.value("model_size_bytes", **llama) == 2_000
    assert rig.value("model_context_length", **llama) == 4096
    assert rig.value("model_loads_total", **llama, cause="first_load") == 0, (
        "models loaded before start are a baseline"
    )
    info = {"family": "qwen3", "parameter_size": "3.2B", "quantization": "Q4_K_M"}
    assert rig.value("model_info", model="qwen3:8b", **info) == 1
    assert rig.labels.slots.is_listed(model_key("QWEN3:8B"))
    assert rig.poller.context_length("llama3.2") == 4096
    assert rig.poller.context_length("qwen3:8b") is None
    assert rig.poller.digest_of("Llama3.2") == DIGEST_A
    assert rig.poller.digest_of("not a name") is None


async def test_ps_transitions_count_loads_and_unloads(rig: Rig, fake: FakeOllama) -> None:
    await rig.poller.poll()
    fake.ps = [ps_entry("qwen3:8b", DIGEST_B, ctx=8192, vram=1_000)]
    await rig.poller.poll()
    assert rig.value("model_loads_total", model="qwen3:8b", cause="first_load") == 1
    assert rig.value("model_unloads_total", model="llama3.2:latest") == 1
    assert rig.value("model_loaded", model="llama3.2:latest") == 0
    assert rig.value("model_vram_bytes", model="llama3.2:latest") is None
    assert rig.value("model_context_length", model="qwen3:8b") == 8192
    assert rig.poller.context_length("llama3.2") is None
    await rig.poller.poll()
    assert rig.value("model_loads_total", model="qwen3:8b", cause="first_load") == 1, (
        "no change, no count"
    )


async def test_a_new_digest_under_the_same_name_is_an_unload_and_a_load(
    rig: Rig, fake: FakeOllama
) -> None:
    # Pulled again and used: the runner under the name is another model.
    await rig.poller.poll()
    fake.ps = [ps_entry("llama3.2:latest", DIGEST_A2, ctx=8192)]
    await rig.poller.poll()
    llama = {"model": "llama3.2:latest"}
    assert (
        rig.value("model_loads_total", **llama, cause="first_load"),
        rig.value("model_unloads_total", **llama),
    ) == (
        1,
        1,
    )
    assert (rig.value("model_loaded", **llama), rig.value("model_context_length", **llama)) == (
        1,
        8192,
    )


async def test_ps_is_read_before_tags_and_a_failing_show_is_not_asked_every_round(
    rig: Rig, fake: FakeOllama
) -> None:
    order: list[str] = []
    read = rig.poller._read

    async def spy(method: str, path: str, body: Any = None) -> dict[str, Any]:
        order.append(path)
        return await read(method, path, body)

    rig.poller._read = spy  # type: ignore[method-assign]
    show = fake._show

    async def not_found(request: web.Request) -> web.Response:
        if (await request.json())["model"] == "qwen3:8b":
            fake.hits["/api/show qwen3:8b"] += 1
            return web.json_response({"error": "not found"}, status=404)
        return await show(request)

    fake._show = not_found  # type: ignore[method-assign]
    for _ in range(3):
        await rig.poller.poll()
    assert order[:3] == ["api/version", "api/ps", "api/tags"]
    assert fake.hits["/api/show qwen3:8b"] == 1  # failed once: retried after SHOW_RETRY


async def test_another_name_for_a_loaded_model_has_its_context(rig: Rig, fake: FakeOllama) -> None:
    # Ollama keys runners by blob: a request for llama3.2:3b (the same digest) runs in the
    # runner /api/ps lists as llama3.2:latest.
    fake.tags.append(tag("llama3.2:3b", DIGEST_A))
    await rig.poller.poll()
    assert rig.poller.context_length("llama3.2:3b") == 4096
    assert rig.poller.context_length("qwen3:8b") is None  # listed, not loaded


async def test_one_ps_read_at_a_time(
    rig: Rig, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first read whose reply is slow, a second started meanwhile after a load: were the
    # older reply taken last, it would roll the load back (an unload, then a second load).
    await rig.poller.poll()
    read = rig.poller._read
    first_reply = asyncio.Event()
    replies = 0

    async def slow_first(method: str, path: str, body: Any = None) -> dict[str, Any]:
        nonlocal replies
        data = await read(method, path, body)
        replies += 1
        if replies == 1:
            await first_reply.wait()  # older state, delivered late
        return data

    monkeypatch.setattr(rig.poller, "_read", slow_first)
    first = asyncio.create_task(rig.poller.poll_ps())
    await asyncio.sleep(0.05)
    fake.ps = [*fake.ps, ps_entry("qwen3:8b", DIGEST_B)]
    second = asyncio.create_task(rig.poller.poll_ps())
    await asyncio.sleep(0.05)
    first_reply.set()
    await asyncio.gather(first, second)
    assert rig.value("model_loads_total", model="qwen3:8b", cause="first_load") == 1
    assert rig.value("model_unloads_total", model="qwen3:8b") == 0
    assert rig.value("model_loaded", model="qwen3:8b") == 1


async def test_version_change_replaces_the_info_series(rig: Rig, fake: FakeOllama) -> None:
    await rig.poller.poll()
    fake.version = "0.34.0"
    await rig.poller.poll()
    assert rig.value("upstream_info", version="0.33.0") is None
    assert rig.value("upstream_info", version="0.34.0") == 1


async def test_show_is_read_once_per_digest(rig: Rig, fake: FakeOllama) -> None:
    for _ in range(3):
        await rig.poller.poll()
    assert fake.hits["/api/show llama3.2:latest"] == 1
    assert fake.hits["/api/show qwen3:8b"] == 1
    fake.tags[0] = tag("llama3.2:latest", DIGEST_A2, family="llama4")
    await rig.poller.poll()
    await rig.poller.poll()
    assert fake.hits["/api/show llama3.2:latest"] == 2
    old = {"family": "llama", "parameter_size": "3.2B", "quantization": "Q4_K_M"}
    assert rig.value("model_info", model="llama3.2:latest", **old) is None
    assert rig.value("model_info", model="llama3.2:latest", **{**old, "family": "llama4"}) == 1
    assert rig.poller.digest_of("llama3.2") == DIGEST_A2


async def test_deleted_model_loses_its_info(rig: Rig, fake: FakeOllama) -> None:
    await rig.poller.poll()
    fake.tags = fake.tags[:1]
    await rig.poller.poll()
    info = {"family": "qwen3", "parameter_size": "3.2B", "quantization": "Q4_K_M"}
    assert rig.value("model_info", model="qwen3:8b", **info) is None
    assert not rig.labels.slots.is_listed(model_key("qwen3:8b"))


async def test_failing_upstream_is_down_and_counted(rig: Rig, fake: FakeOllama) -> None:
    await rig.poller.poll()
    fake.failing = True
    await rig.poller.poll()
    assert not rig.poller.up
    assert rig.value("upstream_up") == 0
    assert rig.value("upstream_poll_errors_total") == 1, "down: one read per round, one error"
    # A server that does not answer reports no loaded model (an offload alert or a VRAM
    # panel must not describe it); its return is a new baseline, not a load.
    for gauge in ("model_loaded", "model_vram_bytes", "model_size_bytes"):
        assert rig.value(gauge, model="llama3.2:latest") is None
    fake.failing = False
    await rig.poller.poll()
    assert rig.value("upstream_up") == 1
    assert rig.value("model_loaded", model="llama3.2:latest") == 1
    assert rig.value("model_loads_total", model="llama3.2:latest", cause="first_load") == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_unreachable_upstream_is_down(session: aiohttp.ClientSession) -> None:
    rig = Rig(f"http://127.0.0.1:{free_port()}", session)
    await rig.poller.poll()
    await rig.poller.poll()
    assert not rig.poller.up
    assert rig.value("upstream_up") == 0
    assert rig.value("upstream_poll_errors_total") == 2
    assert rig.poller.context_length("llama3.2") is None


async def test_malformed_replies_are_poll_errors(rig: Rig, fake: FakeOllama) -> None:
    fake.tags = [{"name": 3}, "junk", {"name": "ok:1", "digest": 7}]
    fake.ps = {"models": "nope"}
    await rig.poller.poll()
    assert rig.poller.up
    assert rig.labels.slots.is_listed(model_key("ok:1"))
    assert rig.poller.context_length("llama3.2") is None


async def test_unknown_name_refreshes_tags_once_within_the_limit(
    rig: Rig, fake: FakeOllama
) -> None:
    await rig.poller.poll()
    fake.tags.append(tag("just-pulled:latest", DIGEST_A2))
    tags_reads = fake.hits["/api/tags"]
    assert rig.labels.label("just-pulled") == "other", "unlisted until the refresh lands"
    rig.labels.label("another-unknown")
    await rig.settle()
    assert fake.hits["/api/tags"] == tags_reads + 1
    assert rig.labels.slots.is_listed(model_key("just-pulled"))
    assert rig.labels.label("just-pulled") == "just-pulled:latest"


async def test_poke_ps_reads_ps_soon(rig: Rig, fake: FakeOllama) -> None:
    await rig.poller.poll()
    fake.ps = [ps_entry("llama3.2:latest", DIGEST_A, ctx=32768)]
    rig.poller.poke_ps()
    rig.poller.poke_ps()
    await rig.settle()
    assert fake.hits["/api/ps"] == 2, "two pokes while one read is pending make one read"
    assert rig.poller.context_length("llama3.2") == 32768


async def test_utilization_uses_the_polled_num_ctx(rig: Rig) -> None:
    await rig.poller.poll()
    observer = MetricsObserver(rig.registry, rig.labels, rig.poller)
    ex = new_exchange("/api/chat", started=1.0)
    ex.request.model, ex.status, ex.outcome, ex.ended = "llama3.2", 200, Outcome.OK, 3.0
    ex.usage = Usage(prompt_eval_count=1000, eval_count=24, has_timings=True)
    observer.request(ex)
    observer.response(ex)
    labels = {"endpoint": "/api/chat", "model": "llama3.2:latest"}
    assert rig.registry.get_sample_value("ollama_tap_context_utilization_ratio_sum", labels) == 0.25


async def test_start_polls_and_stop_ends_cleanly(server: TestServer) -> None:
    registry = CollectorRegistry()
    settings = Settings.model_validate(
        {"upstream": str(server.make_url("")), "poll_interval": 0.02}
    )
    poller = UpstreamPoller(settings, registry, ModelLabels(10))
    await poller.start()
    for _ in range(200):
        if poller.up:
            break
        await asyncio.sleep(0.01)
    assert poller.up
    await poller.stop()
    assert poller._session is None


async def test_names_on_one_blob_share_a_runner_key(rig: Rig, fake: FakeOllama) -> None:
    """Ollama keys runners by the weights' blob (the FROM of /api/show `modelfile`): two
    manifests on one blob get one key, the group's smallest digest; a lone model keeps its
    own digest, shown or not, so its key never moves."""
    blob = "f" * 64
    variant = "c" * 64
    fake.tags.append(tag("llama-variant:latest", variant))

    async def show(request: web.Request) -> web.Response:
        name = (await request.json())["model"]
        weights = blob if name in ("llama3.2:latest", "llama-variant:latest") else "e" * 64
        return web.json_response({"modelfile": f"FROM /m/blobs/sha256-{weights}\n"})

    assert rig.poller.runner_key(variant) == variant, "not shown yet"
    fake._show = show  # type: ignore[method-assign]
    await rig.poller.poll()
    key = min(DIGEST_A, variant)
    assert rig.poller.runner_key(DIGEST_A) == rig.poller.runner_key(variant) == key
    assert rig.poller.runner_key(DIGEST_B) == DIGEST_B
    assert rig.poller.runner_key(None) is None

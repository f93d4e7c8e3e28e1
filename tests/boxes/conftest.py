"""Three fake Ollamas, each holding one model at a time (OLLAMA_MAX_LOADED_MODELS=1), and a
tap in front of them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from ollama_tap.app import BOXES
from ollama_tap.ollama.names import model_key
from tests.conftest import MakeProxy, Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.models import new_model
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.waiting import eventually

NAMES = ("gpu1", "gpu2", "gpu3")
MODELS = ("llama3.2:latest", "qwen3:8b", "gemma3:1b")
LOAD_SECONDS = 0.3


@dataclass
class Rig:
    proxy: Proxy
    fakes: dict[str, FakeOllama]
    servers: dict[str, TestServer]

    def loads(self) -> dict[str, list[str]]:
        """Every load each box made, in order."""
        return {n: list(f.scheduler.loads) for n, f in self.fakes.items() if f.scheduler}


async def box(aiohttp_server: AiohttpServer) -> tuple[FakeOllama, TestServer]:
    fake = FakeOllama()
    fake.models[MODELS[2]] = new_model(MODELS[2])
    fake.scheduler = Scheduler(fake, max_loaded=1, load_seconds=LOAD_SECONDS)
    server = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("")).rstrip("/")
    return fake, server


@pytest.fixture
async def rig(aiohttp_server: AiohttpServer, proxy_factory: MakeProxy) -> Rig:
    made = {name: await box(aiohttp_server) for name in NAMES}
    fakes = {name: fake for name, (fake, _) in made.items()}
    proxy = await proxy_factory(upstream=tuple(f"{n}={f.url}" for n, f in fakes.items()))
    every = proxy.app[BOXES].boxes
    await eventually(lambda: all(b.poller.up and b.poller.has(model_key(MODELS[2])) for b in every))
    return Rig(proxy, fakes, {name: server for name, (_, server) in made.items()})

"""Shared fixtures: an isolated environment, the fake Ollama, and the proxy in front of it."""

from __future__ import annotations

import gc
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
COMPILED_PASS = os.environ.get("OLLAMA_TAP_COMPILED") == "1"
"""Run the compiled modules (mypyc, setup.py) built beside the sources: `make test`'s second
pass, over the relay and per-chunk tests. Otherwise the suite, and the proxies it starts as
subprocesses, run the .py sources even where a build sits beside them."""


def _stale_build() -> str | None:
    """Why the compiled modules beside the sources are not a build of them as they are, if
    they are not: Python imports an extension module before its .py, so an edit would go
    untested. setup.py records the hashes of the sources a build compiled against."""
    if not any((ROOT / "ollama_tap").rglob("*.so")):
        return "no compiled modules are built"
    record = ROOT / compiled.RECORD
    if not record.exists():
        return "the compiled modules have no record of their sources"
    built, now = json.loads(record.read_text()), compiled.source_hashes(ROOT)
    changed = sorted(name for name in built.keys() | now.keys() if built.get(name) != now.get(name))
    return f"{changed[0]} changed since the compiled modules were built" if changed else None


if not COMPILED_PASS:
    from tests.interpreted.sitecustomize import install

    install()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "tests" / "interpreted"), os.environ.get("PYTHONPATH")])
    )

# After the import hook above (ollama_tap.compiled itself is never compiled).
from ollama_tap import compiled  # noqa: E402

if COMPILED_PASS and (_why := _stale_build()) is not None:
    pytest.exit(
        f"OLLAMA_TAP_COMPILED=1, but {_why}: run `make unit-compiled` (which builds them), "
        "or drop OLLAMA_TAP_COMPILED to test the sources",
        returncode=2,
    )

from ollama_tap.app import make_app  # noqa: E402
from ollama_tap.config import Settings  # noqa: E402
from ollama_tap.relay import make_site  # noqa: E402
from tests.support.samples import sample_value  # noqa: E402
from tests.support.serve_process import ADMIN_TOKEN  # noqa: E402

COMPILED = compiled.active()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that patch a module's internals run only against the interpreted sources:
    compiled code calls its functions and reads its constants directly, unpatched."""
    if not COMPILED:
        return
    skip = pytest.mark.skip(
        reason="patches module internals, which compiled code does not look up; "
        "runs in the interpreted pass"
    )
    for item in items:
        if item.get_closest_marker("interpreted"):
            item.add_marker(skip)


pytest_plugins = ["tests.support.fake_ollama.plugin", "tests.support.workers"]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that runs `serve` in-process configures logging globally, onto a stderr that
    pytest closes after the test; later tests must not log into it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _no_collection_pauses() -> Iterator[None]:
    """No cyclic-GC pass inside a test: the proxy runs in the test process, whose heap grows
    over the session until a full collection takes 100–200 ms (measured), which a timing
    assertion reads as proxy latency. Garbage is collected between tests instead."""
    gc.disable()
    yield
    gc.enable()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's OLLAMA_HOST, OLLAMA_TAP_* or data directory, nor a
    terminal size: pytest-xdist's workers inherit COLUMNS=80 and LINES=24 from execnet, a
    serial run none, and the CLI's tables fit COLUMNS (a test wanting one sets it)."""
    for name in list(os.environ):
        if name.startswith("OLLAMA_TAP_") or name in {"OLLAMA_HOST", "OLLAMA_API_KEY"}:
            monkeypatch.delenv(name)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


class Proxy:
    """A running proxy: its app, address, settings and registry."""

    def __init__(
        self, app: web.Application, port: int, settings: Settings, registry: CollectorRegistry
    ) -> None:
        self.app = app
        self.host = "127.0.0.1"
        self.port = port
        self.settings = settings
        self.registry = registry
        self.url = f"http://127.0.0.1:{port}"

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return sample_value(self.registry, name, labels)


MakeProxy = Callable[..., Awaitable[Proxy]]


@pytest.fixture
async def proxy_factory(tmp_path: Path, fake_ollama: Any) -> AsyncIterator[MakeProxy]:
    """Start proxies in front of the fake Ollama; keyword arguments override settings
    (`labels`, a ModelLabels, is passed to make_app).

    Served by aiohttp's runner and `make_site`, as `serve` does (with the default relay the
    front serves the socket). `handler_cancellation` picks which of aiohttp's two
    client-disconnect behaviours aiohttp's handler meets (aiohttp's TestServer always
    cancels, so it cannot test the other); the front always cancels, as `serve` configures.
    """
    runners: list[web.AppRunner] = []

    async def start(
        observers: tuple[object, ...] = (),
        handler_cancellation: bool = True,
        labels: Any = None,
        **overrides: Any,
    ) -> Proxy:
        values: dict[str, Any] = {
            "upstream": fake_ollama.url,
            "db": tmp_path / "records.db",
            "admin_token": ADMIN_TOKEN,
            "poll_interval": 0.2,
            "port": 0,
        }
        values.update(overrides)
        settings = Settings(**values)
        registry = CollectorRegistry()
        app = make_app(settings, registry=registry, observers=observers, labels=labels)
        runner = web.AppRunner(app, handler_cancellation=handler_cancellation, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = make_site(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        return Proxy(app, port, settings, registry)

    yield start
    for runner in reversed(runners):
        await runner.cleanup()


@pytest.fixture
async def proxy(proxy_factory: MakeProxy) -> Proxy:
    return await proxy_factory()

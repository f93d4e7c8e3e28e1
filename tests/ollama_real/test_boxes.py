"""Two real Ollama processes behind one tap: a model goes to the one where it is resident.

Both boxes hold the same model (imported as the tier imports it); only the second has it
loaded. With nothing to choose between but residency, the router would take the first box
given; it must take the second, and the record must say so. A second `ollama serve` of the
tier's own build runs for this module, with a store of its own.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from ollama_tap.app import BOXES
from ollama_tap.ollama.names import model_key
from tests.conftest import MakeProxy
from tests.ollama_real.conftest import GREEDY, MODEL, Ollama, _answers, _create, _paths, call
from tests.support.records import records
from tests.support.serve_process import free_port
from tests.support.waiting import eventually

WITHIN = 60.0
"""Seconds for a load and a poll on a busy 2-core box."""


@pytest.fixture(scope="module")
def other_ollama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ollama]:
    """A second `ollama serve` on a port of its own, with the tier's first model only."""
    binary, first, _ = _paths()
    home = tmp_path_factory.mktemp("ollama-b")
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "OLLAMA_HOST": f"127.0.0.1:{port}",
        "OLLAMA_MODELS": str(home / "models"),
        "OLLAMA_MAX_LOADED_MODELS": "1",
        "OLLAMA_NOPRUNE": "1",
    }
    log = home / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(binary), "serve"], env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the second ollama serve did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    server = Ollama(url, binary, env, log)
    _create(server, MODEL, first, home)
    yield server
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


async def test_a_model_goes_to_the_box_where_it_is_resident(
    proxy_factory: MakeProxy, real_ollama: Ollama, other_ollama: Ollama
) -> None:
    await real_ollama.unload_all()
    await other_ollama.unload_all()
    warm = {"model": MODEL, "prompt": "hi", "stream": False, "options": GREEDY}
    assert (await call(other_ollama.url, "POST", "/api/generate", warm)).status == 200
    upstream = (f"box-a={real_ollama.url}", f"box-b={other_ollama.url}")
    proxy = await proxy_factory(upstream=upstream)
    second = proxy.app[BOXES].by_name["box-b"]
    await eventually(lambda: second.poller.resident(model_key(MODEL)), within=WITHIN)

    for _ in range(2):
        reply = await call(proxy.url, "POST", "/api/generate", warm)
        assert reply.status == 200 and reply.json()["done"] is True
    assert await real_ollama.ps() == []  # nothing ever loaded on the first box
    found = await records(proxy, 2)
    assert {r["box"] for r in found} == {"box-b"}
    assert all(r["route"].startswith(f"{MODEL} resident on box-b") for r in found), found
    assert {r["upstream"] for r in found} == {other_ollama.url}
    listed = (await call(proxy.url, "GET", "/api/ps")).json()["models"]
    assert [m["name"] for m in listed] == [MODEL]

"""Two real Ollama processes behind one tap: a model goes to the one where it is resident.

Both boxes hold the same model (imported as the tier imports it); only the second has it
loaded. With nothing to choose between but residency, the router would take the first box
given; it must take the second, and the record must say so. A second `ollama serve` of the
tier's own build runs for this module, with a store of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ollama_tap.app import BOXES
from ollama_tap.ollama.names import model_key
from tests.conftest import MakeProxy
from tests.ollama_real.conftest import GREEDY, MODEL, Ollama, _create, _paths, call, ollama_serve
from tests.support.records import records
from tests.support.waiting import eventually

WITHIN = 60.0
"""Seconds for a load and a poll on a busy 2-core box."""


@pytest.fixture(scope="module")
def other_ollama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ollama]:
    """A second `ollama serve` on a port of its own, with the tier's first model only."""
    binary, first, _ = _paths()
    home = tmp_path_factory.mktemp("ollama-b")
    with ollama_serve(binary, home, OLLAMA_MAX_LOADED_MODELS="1", OLLAMA_NOPRUNE="1") as server:
        _create(server, MODEL, first, home)
        yield server


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

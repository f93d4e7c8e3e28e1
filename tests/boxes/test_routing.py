"""Three boxes behind one tap: each model goes where it is resident, and a box that stops
costs the clients of the others nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from ollama_tap.app import BOXES
from ollama_tap.ollama.names import model_key
from tests.boxes.conftest import MODELS, Rig
from tests.conftest import MakeProxy
from tests.support.fake_ollama.models import new_model
from tests.support.records import records
from tests.support.waiting import eventually

CLIENTS = 4
ROUNDS = 4


async def chat(session: aiohttp.ClientSession, url: str, model: str, **extra: Any) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    async with session.post(url + "/api/chat", json=body) as resp:
        await resp.read()
        return resp.status


async def test_each_model_goes_where_it_is_resident_and_loads_once(rig: Rig) -> None:
    url = rig.proxy.url
    async with aiohttp.ClientSession() as s:
        for r in range(ROUNDS):  # four clients asking for three models in turn
            wanted = [MODELS[(c + r) % len(MODELS)] for c in range(CLIENTS)]
            statuses = await asyncio.gather(*(chat(s, url, m) for m in wanted))
            assert statuses == [200] * CLIENTS
    loads = rig.loads()
    assert sorted(m for made in loads.values() for m in made) == sorted(MODELS), loads
    assert all(len(made) == 1 for made in loads.values()), loads  # one model per box
    found = await records(rig.proxy, CLIENTS * ROUNDS, endpoint="/api/chat")
    where = {m: {r["box"] for r in found if r["model"] == m} for m in MODELS}
    assert all(len(boxes) == 1 for boxes in where.values()), where
    late = [r for r in found if r["route"].startswith(tuple(f"{m} resident on" for m in MODELS))]
    assert len(late) >= CLIENTS * (ROUNDS - 1), [r["route"] for r in found]
    one = late[0]
    assert one["route"].startswith(f"{one['model']} resident on {one['box']}")
    resident = rig.proxy.sample(
        "ollama_tap_routed_total", {"upstream": one["box"], "tier": "resident"}
    )
    assert resident is not None and resident >= 1
    # The residency gauge follows the box's next /api/ps read, which may come after the replies.
    await eventually(
        lambda: (
            rig.proxy.sample(
                "ollama_tap_model_loaded", {"model": one["model"], "upstream": one["box"]}
            )
            == 1
        )
    )


async def test_a_reload_elsewhere_is_named_in_the_route(rig: Rig) -> None:
    url, llama = rig.proxy.url, MODELS[0]
    async with aiohttp.ClientSession() as s:
        assert await chat(s, url, llama, options={"num_ctx": 8192}) == 200
        home = (await records(rig.proxy, 1))[0]["box"]
        await eventually(
            lambda: rig.proxy.app[BOXES].by_name[home].poller.context_length(llama) == 8192
        )
        # Resident with 8192: a request for 4096 would reload it there; elsewhere it loads.
        assert await chat(s, url, llama, options={"num_ctx": 4096}) == 200
    second = (await records(rig.proxy, 2))[0]
    assert second["box"] != home
    assert f"{home} would have reloaded for num_ctx 8192 → 4096" in second["route"]


async def test_a_stopped_box_costs_the_other_boxes_clients_nothing(rig: Rig) -> None:
    url = rig.proxy.url
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(chat(s, url, m) for m in MODELS))
        found = await records(rig.proxy, 3)
        home = {r["model"]: r["box"] for r in found}
        stopped = home[MODELS[1]]
        errors: list[int] = []

        async def others() -> None:
            for _ in range(6):
                for m in (MODELS[0], MODELS[2]):
                    if (status := await chat(s, url, m)) != 200:
                        errors.append(status)

        running = asyncio.create_task(others())
        await rig.servers[stopped].close()
        assert await chat(s, url, MODELS[1]) == 200  # it loads on another box
        assert await chat(s, url, MODELS[1]) == 200
        await running
    assert errors == []
    moved = [r for r in await records(rig.proxy, 17) if r["model"] == MODELS[1]][:2]
    assert all(r["box"] != stopped and r["outcome"] == "ok" for r in moved), moved
    why = moved[-1]["route"]  # the first after the stop: refused, or already known down
    assert f"{stopped} failed before replying" in why or f"{stopped} is down" in why, why


async def test_listings_are_the_union_of_the_boxes(rig: Rig) -> None:
    url = rig.proxy.url
    fakes = list(rig.fakes.values())
    fakes[0].version = "0.30.1"
    del fakes[1].models[MODELS[0]]
    fakes[2].models["only-here:latest"] = new_model("only-here:latest")
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/api/tags") as resp:
            names = [m["name"] for m in (await resp.json())["models"]]
            assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        async with s.get(url + "/api/version") as resp:
            assert await resp.json() == {"version": "0.30.1"}
        await chat(s, url, MODELS[0])
        async with s.get(url + "/api/ps") as resp:
            assert [m["name"] for m in (await resp.json())["models"]] == [MODELS[0]]
    assert len(names) == len(set(names))
    assert set(names) >= {*MODELS, "only-here:latest"}


async def test_management_routes_need_the_box_named(rig: Rig) -> None:
    url = rig.proxy.url
    body = {"source": MODELS[0], "destination": "mine:latest"}
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/api/copy", json=body) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
        assert "X-Ollama-Tap-Upstream" in error and "gpu1, gpu2, gpu3" in error
        headers = {"X-Ollama-Tap-Upstream": "gpu2"}
        async with s.post(url + "/api/copy", json=body, headers=headers) as resp:
            assert resp.status == 200
        headers = {"X-Ollama-Tap-Upstream": "gpu9"}
        async with s.post(url + "/api/copy", json=body, headers=headers) as resp:
            assert resp.status == 400
            assert "'gpu9'" in (await resp.json())["error"]
    assert "mine:latest" in rig.fakes["gpu2"].models
    assert "mine:latest" not in rig.fakes["gpu1"].models


async def test_client_affinity_keeps_a_client_on_its_last_resident_box(
    rig: Rig, proxy_factory: MakeProxy
) -> None:
    boxes = tuple(f"{n}={f.url}" for n, f in rig.fakes.items())
    sticky = await proxy_factory(upstream=boxes, affinity="client")
    llama = MODELS[0]
    async with aiohttp.ClientSession() as s:
        for name in ("gpu1", "gpu2"):  # resident on both; the app last used gpu2
            headers = {"X-Ollama-Tap-Upstream": name, "X-Ollama-Tap-Client": "notes"}
            body = {"model": llama, "messages": []}
            async with s.post(sticky.url + "/api/chat", json=body, headers=headers) as resp:
                assert resp.status == 200
        await eventually(lambda: all(
            b.poller.resident(model_key(llama)) for b in sticky.app[BOXES].boxes[:2]
        ))  # fmt: skip
        for written, (client, home) in enumerate((("notes", "gpu2"), ("other", "gpu1")), 3):
            body = {"model": llama, "messages": []}
            headers = {"X-Ollama-Tap-Client": client}
            async with s.post(sticky.url + "/api/chat", json=body, headers=headers) as resp:
                assert resp.status == 200
            newest = (await records(sticky, written))[0]
            assert (newest["client_name"], newest["box"]) == (client, home), newest["route"]


async def test_a_reload_the_guard_spares_keeps_the_resident_box_first(
    rig: Rig, proxy_factory: MakeProxy
) -> None:
    boxes = tuple(f"{n}={f.url}" for n, f in rig.fakes.items())
    guarded = await proxy_factory(upstream=boxes, reload_guard=True)
    llama = MODELS[0]
    async with aiohttp.ClientSession() as s:
        assert await chat(s, guarded.url, llama, options={"num_ctx": 8192}) == 200
        home = (await records(guarded, 1))[0]["box"]
        await eventually(
            lambda: guarded.app[BOXES].by_name[home].poller.context_length(llama) == 8192
        )
        # Without the guard it would load elsewhere (test_a_reload_elsewhere_is_named_…);
        # with it the request goes where the model is, as 8192, and nothing loads again.
        assert await chat(s, guarded.url, llama, options={"num_ctx": 4096}) == 200
    second = (await records(guarded, 2))[0]
    assert second["box"] == home
    assert second["route"] == (
        f"{llama} resident on {home} (num_ctx 8192 kept by the reload guard; "
        "the request asked num_ctx 4096)"
    )
    assert second["reload_guard"] == {
        "model": llama, "changes": [{"field": "num_ctx", "from": 4096, "to": 8192}],
    }  # fmt: skip
    assert rig.loads() == {n: [llama] if n == home else [] for n in rig.fakes}
    sent = [r for r in rig.fakes[home].received if r.method == "POST"][-1]
    assert orjson.loads(sent.body)["options"] == {"num_ctx": 8192}
    assert guarded.sample("ollama_tap_routed_total", {"upstream": home, "tier": "resident"}) == 1

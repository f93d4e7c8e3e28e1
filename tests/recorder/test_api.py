"""The read API: filters, cursor pagination, one record, errors; reads never block the loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from ollama_tap.auth import CSP, auth_middleware
from ollama_tap.exchange import Outcome
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.api import add_routes
from tests.recorder.factory import WALL0, chat_body, drive, exchange, pieces

pytestmark = pytest.mark.usefixtures("blockbuster")
TOKEN = "api-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(
    recorder: Recorder, aiohttp_client: Callable[[web.Application], Awaitable[Client]]
) -> Client:
    for i in range(25):
        body = chat_body() | {"model": "llama3.2" if i % 2 else "qwen3:8b"}
        outcome = Outcome.OK if i % 5 else Outcome.CLIENT_DISCONNECTED
        endpoint = "/api/chat" if i < 20 else "/api/generate"
        ex = exchange(
            endpoint=endpoint, body=body, outcome=outcome, started_wall=WALL0 + i, ex_id=f"r{i:02d}"
        )
        drive(recorder, ex, pieces(2))
    await recorder.stop()
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    add_routes(app, recorder)
    return await aiohttp_client(app)


async def ids(client: Client, **query: Any) -> tuple[list[str], str | None]:
    resp = await client.get("/_tap/api/records", params=query, headers=AUTH)
    assert resp.status == 200, await resp.text()
    data = await resp.json()
    return [r["id"] for r in data["records"]], data["next_cursor"]


async def test_cursor_pagination_walks_every_record_once_newest_first(client: Client) -> None:
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = await ids(client, limit=10, **({"cursor": cursor} if cursor else {}))
        seen += page
        if cursor is None:
            break
    assert seen == [f"r{i:02d}" for i in reversed(range(25))]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"model": "llama3.2"}, [i for i in range(25) if i % 2]),
        ({"model": "qwen3:8b", "outcome": "client_disconnected"}, [0, 10, 20]),
        ({"endpoint": "/api/generate"}, [20, 21, 22, 23, 24]),
        ({"since": str(WALL0 + 5), "until": "2025-06-15T15:06:50Z"}, [5, 6, 7, 8, 9]),
    ],
)
async def test_filters(client: Client, query: dict[str, str], expected: list[int]) -> None:
    page, _ = await ids(client, **query)
    assert page == [f"r{i:02d}" for i in sorted(expected, reverse=True)]


async def test_one_record_with_its_timeline(client: Client) -> None:
    resp = await client.get("/_tap/api/records/r03", headers=AUTH)
    record = await resp.json()
    assert record["id"] == "r03"
    assert record["timeline"]["kinds"] == ["thinking", "content"]
    assert resp.headers["Content-Security-Policy"] == CSP


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/_tap/api/records/nope", 404),
        ("/_tap/api/records?limit=0", 400),
        ("/_tap/api/records?cursor=abc", 400),
        ("/_tap/api/records?since=yesterday", 400),
    ],
)
async def test_errors_in_ollama_shape(client: Client, path: str, status: int) -> None:
    resp = await client.get(path, headers=AUTH)
    assert resp.status == status
    assert set(await resp.json()) == {"error"}


@pytest.mark.parametrize("path", ["/_tap/api/records", "/_tap/api/records/r01"])
async def test_every_api_route_needs_the_token(client: Client, path: str) -> None:
    assert (await client.get(path)).status == 401
    assert (await client.get(path, headers={"Authorization": "Bearer wrong"})).status == 401


@pytest.mark.parametrize("cursor", ["²", "99999999999999999999999", "1e3", "-1"])
async def test_a_cursor_that_is_no_row_id_is_a_400(client: Client, cursor: str) -> None:
    """`²` passed str.isdigit and made int() raise: a 500."""
    resp = await client.get("/_tap/api/records", params={"cursor": cursor}, headers=AUTH)
    assert resp.status == 400
    assert "cursor is invalid" in (await resp.json())["error"]

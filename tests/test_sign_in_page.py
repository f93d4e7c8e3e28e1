"""A 401 opened in a browser is a page naming the fix; API clients keep the JSON error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from ollama_tap.auth import CSP, auth_middleware

Client = TestClient[web.Request, web.Application]
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def inspector(request: web.Request) -> web.Response:
    return web.Response(text="the inspector")


@pytest.fixture
async def client(aiohttp_client: Callable[[web.Application], Awaitable[Client]]) -> Client:
    app = web.Application(middlewares=[auth_middleware("a-token-of-sixteen-or-more")])
    app.router.add_get("/_tap/", inspector)
    return await aiohttp_client(app)


async def test_a_browser_gets_a_page_naming_the_fix(client: Client) -> None:
    resp = await client.get("/_tap/", headers={"Accept": BROWSER})
    assert resp.status == 401
    assert resp.content_type == "text/html"
    assert resp.headers["Content-Security-Policy"] == CSP
    page = await resp.text()
    assert "/_tap/?token=" in page and "admin-token" in page and "ollama-tap serve" in page


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
async def test_api_clients_get_json(client: Client, accept: str | None) -> None:
    headers = {"Accept": accept} if accept else {}
    resp = await client.get("/_tap/", headers=headers)
    assert resp.status == 401
    assert resp.content_type == "application/json"
    assert "needs the admin token" in (await resp.json())["error"]

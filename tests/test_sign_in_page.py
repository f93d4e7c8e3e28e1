"""A 401 opened in a browser is a page naming the fix; API clients keep the JSON error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from ollama_tap.attempts import LIMIT
from ollama_tap.auth import COOKIE, CSP, auth_middleware

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


@pytest.mark.parametrize(
    ("query", "cookie", "why"),
    [
        ("", None, "This browser is not signed in."),
        ("?token=not-the-token-of-this-tap", None, "is not this tap's admin token"),
        ("", "a-session-this-tap-never-opened", "session has ended"),
    ],
)
async def test_the_page_says_why(client: Client, query: str, cookie: str | None, why: str) -> None:
    cookies = {COOKIE: cookie} if cookie else {}
    resp = await client.get(f"/_tap/{query}", headers={"Accept": BROWSER}, cookies=cookies)
    assert resp.status == 401 and resp.content_type == "text/html"
    page = await resp.text()
    assert why in page and "/_tap/?token=" in page


async def test_too_many_wrong_tokens_is_a_page_in_a_browser(client: Client) -> None:
    for _ in range(LIMIT):
        resp = await client.get("/_tap/?token=wrong-wrong-wrong-wrong", headers={"Accept": BROWSER})
        assert resp.status == 401
    resp = await client.get("/_tap/?token=wrong-wrong-wrong-wrong", headers={"Accept": BROWSER})
    assert resp.status == 429 and resp.content_type == "text/html"
    assert int(resp.headers["Retry-After"]) > 0
    assert "Too many wrong tokens" in await resp.text()
    resp = await client.get("/_tap/?token=wrong-wrong-wrong-wrong")
    assert resp.status == 429 and "too many wrong admin tokens" in (await resp.json())["error"]

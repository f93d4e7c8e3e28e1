"""In Chromium: what the inspector's cookie gives away to another port of the same host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.conftest import Proxy
from tests.inspector.browser import Page
from tests.support.serve_process import ADMIN_TOKEN


@pytest.fixture
async def other_port() -> AsyncIterator[tuple[str, list[str]]]:
    """Anyone's server on another port of 127.0.0.1; it keeps the Cookie headers it is sent."""
    seen: list[str] = []

    async def steal(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie", ""))
        return web.Response(text="thanks")

    app = web.Application()
    app.router.add_get("/_tap/steal", steal)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}", seen
    await server.close()


async def test_the_cookie_another_port_is_sent_holds_no_token(
    proxy: Proxy, page: Page, other_port: tuple[str, list[str]]
) -> None:
    await page.navigate(f"{proxy.url}/_tap/?token={ADMIN_TOKEN}")
    await page.wait_for("document.querySelector('#records') !== null")
    [cookie] = (await page.send("Network.getCookies", urls=[f"{proxy.url}/_tap/"]))["cookies"]
    # Cookies ignore ports (RFC 6265 §8.5): Chromium sends this one to the other server.
    url, seen = other_port
    await page.navigate(f"{url}/_tap/steal")
    assert seen == [f"{cookie['name']}={cookie['value']}"]
    assert ADMIN_TOKEN not in seen[0]
    assert cookie["expires"] > 0  # a session with an end, not one for as long as the browser runs

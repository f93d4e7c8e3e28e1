"""The inspector's routes on a running proxy: the page, its static files, auth and headers."""

from __future__ import annotations

import re

import aiohttp
import pytest
from yarl import URL

from ollama_tap.auth import CSP
from ollama_tap.exchange import Outcome, OutputKind
from ollama_tap.inspector import STATIC, load_assets
from tests.conftest import Proxy
from tests.support.serve_process import ADMIN_TOKEN

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SCRIPT = "\n".join(p.read_text() for p in sorted(STATIC.glob("*.js")))
"""Every module of the page (inspector.js imports the others)."""


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/_tap/", "text/html"),
        ("/_tap/static/index.html", "text/html"),
        ("/_tap/static/inspector.js", "text/javascript"),
        ("/_tap/static/inspector.css", "text/css"),
        ("/_tap/static/favicon.svg", "image/svg+xml"),
    ],
)
async def test_files_with_their_types_and_headers(
    proxy: Proxy, path: str, content_type: str
) -> None:
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(proxy.url + path) as resp:
            assert resp.status == 200
            assert resp.content_type == content_type
            assert resp.charset == "utf-8"
            assert resp.headers["Cache-Control"] == "no-cache"
            assert resp.headers["Content-Security-Policy"] == CSP
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            etag = resp.headers["ETag"]
            assert await resp.read()
        async with s.get(proxy.url + path, headers={"If-None-Match": etag}) as resp:
            assert resp.status == 304
            assert resp.headers["Cache-Control"] == "no-cache"


async def test_the_page_needs_the_token(proxy: Proxy) -> None:
    async with aiohttp.ClientSession() as s:
        for path in ("/_tap/", "/_tap/static/inspector.js"):
            async with s.get(proxy.url + path) as resp:
                assert resp.status == 401


async def test_token_in_url_redirects_to_the_page_with_a_cookie(proxy: Proxy) -> None:
    # unsafe: aiohttp's jar otherwise refuses cookies from IP addresses.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        url = f"{proxy.url}/_tap/?token={ADMIN_TOKEN}"
        async with s.get(url, allow_redirects=False) as resp:
            assert resp.status == 303
            assert resp.headers["Location"] == "/_tap/"
            cookie = resp.headers["Set-Cookie"]
        assert all(part in cookie for part in ("HttpOnly", "SameSite=Strict", "Path=/_tap/;"))
        async with s.get(f"{proxy.url}/_tap/") as resp:
            assert resp.status == 200
            assert "<title>ollama-tap inspector</title>" in await resp.text()


async def test_bare_prefix_redirects_to_the_page(proxy: Proxy) -> None:
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.get(proxy.url + "/_tap", allow_redirects=False) as resp:
            assert resp.status == 308
            assert resp.headers["Location"] == "/_tap/"
            assert resp.headers["Cache-Control"] == "no-store"  # it may carry ?token=


@pytest.mark.parametrize(
    "name",
    [
        "..%2F__init__.py",
        "%2E%2E%2F__init__.py",
        "..%5C__init__.py",
        "__init__.py",
        "missing.js",
        "..%2F..%2Fapp.py",
        "%2Fetc%2Fpasswd",
    ],
)
async def test_nothing_outside_the_static_files(proxy: Proxy, name: str) -> None:
    url = URL(f"{proxy.url}/_tap/static/{name}", encoded=True)
    async with aiohttp.ClientSession(headers=AUTH) as s, s.get(url) as resp:
        assert resp.status == 404
        body = await resp.text()
    assert "import" not in body and "root:" not in body


def test_every_static_file_is_served() -> None:
    assert set(load_assets()) == {p.name for p in STATIC.iterdir()}


def _js_list(name: str) -> list[str]:
    match = re.search(rf"const {name} = \[(.*?)\];", SCRIPT, re.S)
    assert match, f"{name} not found in the inspector's modules"
    return re.findall(r'"([^"]+)"', match.group(1))


def test_page_knows_every_outcome_and_output_kind() -> None:
    assert _js_list("OUTCOMES") == [str(o) for o in Outcome]
    assert _js_list("KINDS") == [str(k) for k in OutputKind]


def test_no_html_parsing_and_nothing_inline() -> None:
    """Recorded text must never be parsed as HTML, and the CSP allows nothing inline."""
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in SCRIPT
    html = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert not re.search(r"<style|\sstyle=|\son\w+=|(?:src|href)=\"(?:https?:)?//", html)

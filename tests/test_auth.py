"""Access to /_tap/: bearer, the one-time ?token= → cookie exchange, open healthz, headers."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.auth import COOKIE, CSP, admin_token, auth_middleware
from proxy.config import ConfigError, Settings

TOKEN = "s3cret-admin-token"
Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def client(aiohttp_client: MakeClient) -> Client:
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    for path in ("/_tap/", "/_tap/healthz", "/_tap/api/records", "/api/tags"):
        app.router.add_get(path, ok)
    return await aiohttp_client(app)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": f"Bearer {TOKEN}"}, 200),
        ({"Authorization": f"bearer {TOKEN}"}, 200),
        ({"Authorization": "Bearer wrong-token"}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
    ],
)
async def test_bearer(
    client: Client, headers: dict[str, str], status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    resp = await client.get("/_tap/api/records", headers=headers)
    assert resp.status == status
    if status == 401:
        body = await resp.json()
        assert set(body) == {"error"}
        assert "Authorization: Bearer" in body["error"]
    assert "wrong-token" not in caplog.text
    assert TOKEN not in caplog.text


async def test_token_in_url_becomes_a_cookie_and_a_clean_redirect(client: Client) -> None:
    resp = await client.get(f"/_tap/?token={TOKEN}&view=list", allow_redirects=False)
    assert resp.status == 303
    assert resp.headers["Location"] == "/_tap/?view=list"
    cookie = resp.cookies[COOKIE]
    assert cookie.value == TOKEN
    assert (cookie["httponly"], cookie["samesite"], cookie["path"]) == (True, "Strict", "/_tap")
    again = await client.get("/_tap/api/records")  # the client's jar now holds the cookie
    assert again.status == 200


async def test_wrong_token_in_url_is_refused(client: Client) -> None:
    resp = await client.get("/_tap/?token=nope", allow_redirects=False)
    assert resp.status == 401
    assert COOKIE not in resp.cookies


async def test_healthz_and_other_paths_are_open(client: Client) -> None:
    assert (await client.get("/_tap/healthz")).status == 200
    resp = await client.get("/api/tags")
    assert resp.status == 200
    assert "Content-Security-Policy" not in resp.headers


@pytest.mark.parametrize("path", ["/_tap/healthz", "/_tap/api/records", "/_tap/missing"])
async def test_every_tap_reply_carries_the_security_headers(client: Client, path: str) -> None:
    resp = await client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.headers["Content-Security-Policy"] == CSP
    assert "frame-ancestors 'none'" in CSP
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    # The API's replies hold prompts: never in the browser's disk cache.
    assert resp.headers.get("Cache-Control") == ("no-store" if "/api/" in path else None)


async def test_none_disables_auth(aiohttp_client: MakeClient) -> None:
    app = web.Application(middlewares=[auth_middleware(None)])
    app.router.add_get("/_tap/api/records", ok)
    client = await aiohttp_client(app)
    assert (await client.get("/_tap/api/records")).status == 200


def settings(tmp_path: Path, token: str | None = None) -> Settings:
    return Settings.model_validate({"db": tmp_path / "data" / "records.db", "admin_token": token})


def test_generated_token_is_kept_0600_and_reused(tmp_path: Path) -> None:
    first = admin_token(settings(tmp_path))
    assert first
    assert len(first) >= 32
    path = tmp_path / "data" / "admin-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert admin_token(settings(tmp_path)) == first


def test_explicit_token_and_none(tmp_path: Path) -> None:
    assert admin_token(settings(tmp_path, "given")) == "given"
    assert admin_token(settings(tmp_path, "none")) is None
    assert not (tmp_path / "data" / "admin-token").exists()


async def test_a_non_utf8_credential_is_refused_and_never_logged(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # A copy-pasted token with a trailing no-break space, as Python's http.client sends it
    # (latin-1): encoding it for the comparison raised, answering 500 and logging the token.
    caplog.set_level(logging.DEBUG)
    for line in (f"Authorization: Bearer {TOKEN}\xa0", f"Cookie: {COOKIE}={TOKEN}\xa0"):
        reader, writer = await asyncio.open_connection(client.host, client.port)
        head = f"GET /_tap/api/records HTTP/1.1\r\nHost: x\r\n{line}\r\n\r\n"
        writer.write(head.encode("latin-1"))
        assert (await reader.readline()).startswith(b"HTTP/1.1 401")
        writer.close()
    assert TOKEN not in caplog.text


async def test_a_token_in_the_url_always_leaves_it(client: Client) -> None:
    # Signed in already (the cookie), the printed URL opened again: the token must not stay
    # in the address bar; a wrong one is dropped the same way, and sets no cookie.
    first = await client.get(f"/_tap/?token={TOKEN}", allow_redirects=False)
    assert first.status == 303
    for given in (TOKEN, "stale-token"):
        resp = await client.get(f"/_tap/?token={given}&view=list", allow_redirects=False)
        assert (resp.status, resp.headers["Location"]) == (303, "/_tap/?view=list")
        assert (COOKIE in resp.cookies) is (given == TOKEN)


async def test_the_cookie_is_the_token_that_was_checked(client: Client) -> None:
    resp = await client.get(f"/_tap/?token={TOKEN}&token=junk", allow_redirects=False)
    assert resp.status == 303
    assert resp.cookies[COOKIE].value == TOKEN


@pytest.mark.parametrize("plant", ["mode", "owner", "symlink"])
def test_a_token_file_anyone_else_could_have_planted_is_refused(tmp_path: Path, plant: str) -> None:
    # In a shared directory, another user could leave a token they know beside the database.
    path = tmp_path / "data" / "admin-token"
    path.parent.mkdir()
    if plant == "symlink":
        (tmp_path / "elsewhere").write_text("attacker-known\n")
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_text("attacker-known\n")
        path.chmod(0o644 if plant == "mode" else 0o600)
        if plant == "owner":
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(path, 4242, -1)
    with pytest.raises(ConfigError, match="admin-token"):
        admin_token(settings(tmp_path))

"""Access to /_tap/: bearer, the one-time ?token= → session cookie exchange, open healthz,
headers, the back-off on wrong tokens, and a namespace nothing is forwarded from."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from structlog.testing import capture_logs

from ollama_tap.attempts import GLOBAL_LIMIT, LIMIT
from ollama_tap.auth import COOKIE, CSP, MIN_TOKEN, admin_token, auth_middleware
from ollama_tap.config import ConfigError, Settings
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama
from tests.support.serve_process import ADMIN_TOKEN

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


async def test_token_in_url_becomes_a_session_cookie_and_a_clean_redirect(client: Client) -> None:
    resp = await client.get(f"/_tap/?token={TOKEN}&view=list", allow_redirects=False)
    assert resp.status == 303
    assert resp.headers["Location"] == "/_tap/?view=list"
    cookie = resp.cookies[COOKIE]
    assert (cookie["httponly"], cookie["samesite"], cookie["path"]) == (True, "Strict", "/_tap/")
    assert cookie["max-age"] == str(12 * 3600)
    again = await client.get("/_tap/api/records")  # the client's jar now holds the cookie
    assert again.status == 200


async def test_the_cookie_is_a_session_never_the_token(client: Client) -> None:
    # Cookies ignore ports: whatever the cookie holds, a page on any other port of this
    # host is sent. It must not be the token, and the token is no cookie.
    resp = await client.get(f"/_tap/?token={TOKEN}", allow_redirects=False)
    session = resp.cookies[COOKIE].value
    assert TOKEN not in resp.headers["Set-Cookie"]
    assert len(session) >= 32 and session != TOKEN
    client.session.cookie_jar.clear()
    for value, status in ((TOKEN, 401), ("not-a-session", 401), (session, 200)):
        got = await client.get("/_tap/api/records", headers={"Cookie": f"{COOKIE}={value}"})
        assert got.status == status, value


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
    assert admin_token(settings(tmp_path, "given-token-of-20ch")) == "given-token-of-20ch"
    assert admin_token(settings(tmp_path, "none")) is None
    assert not (tmp_path / "data" / "admin-token").exists()


@pytest.mark.parametrize("where", ["setting", "file"])
def test_a_short_token_is_refused_with_the_way_to_make_one(tmp_path: Path, where: str) -> None:
    short = "x" * (MIN_TOKEN - 1)
    if where == "file":
        path = tmp_path / "data" / "admin-token"
        path.parent.mkdir(mode=0o700)
        path.write_text(short + "\n")
        path.chmod(0o600)
    with pytest.raises(ConfigError, match=f"at least {MIN_TOKEN}") as refused:
        admin_token(settings(tmp_path, short if where == "setting" else None))
    assert "secrets.token_urlsafe" in str(refused.value) and "make env" in str(refused.value)
    assert admin_token(settings(tmp_path, "y" * MIN_TOKEN)) == "y" * MIN_TOKEN


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


async def test_the_first_token_is_the_one_checked(client: Client) -> None:
    resp = await client.get(f"/_tap/?token={TOKEN}&token=junk", allow_redirects=False)
    assert (resp.status, resp.headers["Location"]) == (303, "/_tap/")
    assert COOKIE in resp.cookies
    assert (await client.get("/_tap/api/records")).status == 200


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


async def test_wrong_tokens_earn_a_429_and_the_right_token_still_passes(client: Client) -> None:
    signed_in = await client.get(f"/_tap/?token={TOKEN}", allow_redirects=False)
    session = {"Cookie": f"{COOKIE}={signed_in.cookies[COOKIE].value}"}
    client.session.cookie_jar.clear()
    for _ in range(3):  # no token at all: not an attempt, not counted
        assert (await client.get("/_tap/api/records")).status == 401
    for i in range(6):
        wrong = {"Authorization": f"Bearer wrong-token-{i:02}-xxxxxxx"}
        resp = await client.get("/_tap/api/records", headers=wrong)
        assert resp.status == (401 if i < LIMIT else 429)
    assert 55 <= int(resp.headers["Retry-After"]) <= 60
    body = await resp.json()
    assert set(body) == {"error"} and "try again in" in body["error"]
    assert resp.headers["Content-Security-Policy"] == CSP
    # The address is past its limit, yet the right token is never held up (a TLS front on
    # the same host makes every client this one address).
    right = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/_tap/api/records", headers=right)).status == 200
    resp = await client.get(f"/_tap/?token={TOKEN}", allow_redirects=False)
    assert resp.status == 303 and COOKIE in resp.cookies
    assert (await client.get("/_tap/api/records", headers=session)).status == 200


async def test_rotating_addresses_meets_the_shared_budget(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    """250 source addresses × 5 wrong tokens went unthrottled when the count was per address
    only: the shared budget answers 429 once GLOBAL_LIMIT wrong tokens came from any."""
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    app.router.add_get("/_tap/api/records", ok)
    server = await aiohttp_server(app)
    statuses: list[int] = []
    with capture_logs() as lines:
        await _guess_from_15_addresses(server, statuses)
    assert statuses[:GLOBAL_LIMIT] == [401] * GLOBAL_LIMIT
    assert set(statuses[GLOBAL_LIMIT:]) == {429}
    [said] = [line for line in lines if line["event"] == "admin_token_failures"]
    assert "guess-" not in str(said)


async def _guess_from_15_addresses(server: TestServer, statuses: list[int]) -> None:
    for a in range(1, 16):
        connector = aiohttp.TCPConnector(local_addr=(f"127.0.210.{a}", 0))
        async with aiohttp.ClientSession(connector=connector) as s:
            for k in range(3):  # under the per-address limit
                wrong = {"Authorization": f"Bearer guess-{a}-{k}-xxxxxxxxxxxx"}
                async with s.get(server.make_url("/_tap/api/records"), headers=wrong) as resp:
                    statuses.append(resp.status)
            right = {"Authorization": f"Bearer {TOKEN}"}
            async with s.get(server.make_url("/_tap/api/records"), headers=right) as resp:
                assert resp.status == 200


async def raw_request(proxy: Proxy, head: str) -> tuple[int, bytes]:
    """One request as bytes, exactly as given; the status and the whole reply."""
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(head.encode() + b"Host: localhost\r\nConnection: close\r\n\r\n")
    reply = await reader.read(-1)
    writer.close()
    return int(reply.split(b" ", 2)[1]), reply


@pytest.mark.parametrize(
    "target",
    ["GET /_tap%2Fapi/records", "GET /_tap%2fapi%2Frecords?limit=1", "POST /_tap", "PUT /_tap"],
)
async def test_a_tap_path_the_router_reads_otherwise_is_never_forwarded(
    proxy: Proxy, fake_ollama: FakeOllama, target: str
) -> None:
    # The decoded path is the proxy's (so it needs the token), while the router keeps %2F
    # and would hand it to the catch-all: to Ollama, with the admin token in its headers.
    # (The bare /_tap is open: it only redirects GETs to /_tap/.)
    status, reply = await raw_request(proxy, f"{target} HTTP/1.1\r\n")
    assert status == (404 if target.endswith("/_tap") else 401)
    bearer = f"Authorization: Bearer {ADMIN_TOKEN}\r\n"
    status, reply = await raw_request(proxy, f"{target} HTTP/1.1\r\n{bearer}Content-Length: 0\r\n")
    assert status == 404 and b'"error": "ollama-tap: no such path /_tap' in reply
    assert [r for r in fake_ollama.received if "tap" in r.path_qs] == []


async def test_the_bare_tap_path_signs_in_at_the_page(proxy: Proxy) -> None:
    # The cookie is scoped to /_tap/, so /_tap only redirects there, token and all.
    status, reply = await raw_request(proxy, f"GET /_tap?token={ADMIN_TOKEN} HTTP/1.1\r\n")
    assert status == 308 and f"Location: /_tap/?token={ADMIN_TOKEN}\r\n".encode() in reply
    status, reply = await raw_request(proxy, f"GET /_tap/?token={ADMIN_TOKEN} HTTP/1.1\r\n")
    assert status == 303 and f"Set-Cookie: {COOKIE}=".encode() in reply

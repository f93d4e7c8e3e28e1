"""The admin token and the middleware that guards /_tap/ (API and inspector).

Recordings hold other people's prompts, so /_tap/ needs the token on every bind,
loopback included; only /_tap/healthz (which reveals nothing) is open. The API takes
``Authorization: Bearer``; a browser opens ``/_tap/?token=…`` once and gets an HttpOnly,
SameSite=Strict cookie scoped to /_tap plus a redirect to the clean URL, so the token
leaves the address bar (also when the browser was signed in already). Comparisons are
constant-time and the token is never logged (the access log prints no query string). A
token file beside the database is trusted only if this user owns it and nobody else may
read it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.config import ConfigError, Settings

PREFIX: Final = "/_tap"
OPEN_PATHS: Final = frozenset({"/_tap/healthz"})
COOKIE: Final = "ollama_tap_token"
NONE: Final = "none"
CSP: Final = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
API_HEADERS: Final = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
"""The API's replies hold prompts: kept out of the browser's disk cache."""


def token_file(settings: Settings) -> Path:
    return settings.db_path.parent / "admin-token"


def admin_token(settings: Settings) -> str | None:
    """The token from the settings, else the one kept beside the database (created 0600 at
    first start); None when it is 'none' (Settings.check allows that on loopback only)."""
    if settings.admin_token == NONE:
        return None
    if settings.admin_token:
        return settings.admin_token
    path = token_file(settings)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _kept_token(path)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def _kept_token(path: Path) -> str:
    """The token in an existing file, if this user made it and nobody else can read or
    change it: anyone able to plant it (a shared directory) would hold the recordings."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror}); delete it to have a new "
                          "admin token made") from None  # fmt: skip
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise ConfigError(
                f"{path} must belong to this user and be readable by nobody else (mode 0600); "
                "delete it to have a new admin token made, or fix its owner and mode"
            )
        token = f.read().strip()
    if not token:
        raise ConfigError(f"{path} is empty; delete it to have a new admin token made")
    return token


def _matches(given: str | None, token: str) -> bool:
    # surrogateescape: a header's non-UTF-8 bytes (aiohttp keeps them so) must not raise,
    # and the exception's text would carry the credential into the log.
    return given is not None and hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape")
    )


def _bearer(request: web.Request) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _unauthorized() -> web.Response:
    return web.json_response(
        {
            "error": "ollama-tap: /_tap/ needs the admin token; send 'Authorization: Bearer "
            "<token>' or open /_tap/?token=<token> once in a browser (`ollama-tap serve` "
            "prints it; it is kept in the file admin-token beside the database)."
        },
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="ollama-tap"'},
    )


def _without_token(request: web.Request, cookie: str | None) -> web.Response:
    """A redirect to the same URL without its `token` parameters, setting the cookie."""
    query = request.rel_url.query.copy()
    query.popall("token")
    clean = request.rel_url.with_query(query)
    response = web.Response(status=303, headers={"Location": str(clean)})
    if cookie is not None:
        response.set_cookie(
            COOKIE, cookie, path=PREFIX, httponly=True, samesite="Strict", secure=request.secure
        )
    return response


def _check(request: web.Request, token: str) -> web.StreamResponse | None:
    """None when the request may pass, else the reply that refuses or redirects it."""
    given = request.rel_url.query.get("token") if request.method == "GET" else None
    if given is not None and _matches(given, token):
        return _without_token(request, given)
    if not (_matches(_bearer(request), token) or _matches(request.cookies.get(COOKIE), token)):
        return _unauthorized()
    if given is not None:
        return _without_token(request, None)  # signed in already: the token leaves the URL
    return None


class Middleware(Protocol):
    """What `web.middleware` functions are: aiohttp's Middleware, returning a coroutine."""

    def __call__(
        self, request: web.Request, handler: Handler
    ) -> Coroutine[Any, Any, web.StreamResponse]: ...


def auth_middleware(token: str | None) -> Middleware:
    """Guard /_tap/* (all but /_tap/healthz) and set the security headers on its replies."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            return await handler(request)
        refused = None if token is None or path in OPEN_PATHS else _check(request, token)
        headers = API_HEADERS if path.startswith(PREFIX + "/api/") else SECURITY_HEADERS
        try:
            response = refused or await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    return middleware

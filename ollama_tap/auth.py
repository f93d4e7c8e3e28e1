"""The admin token and the middleware that guards /_tap/ (API and inspector).

Recordings hold other people's prompts, so /_tap/ needs the token on every bind,
loopback included; only /_tap/healthz (which reveals nothing) and the bare /_tap (a
redirect to /_tap/) are open. The API takes ``Authorization: Bearer``; a browser opens
``/_tap/?token=…`` once and gets a session (ollama_tap/sessions.py) in an HttpOnly,
SameSite=Strict cookie scoped to /_tap/, plus a redirect to the clean URL, so the token
leaves the address bar (also when the browser was signed in already). Comparisons are
constant-time, wrong tokens earn a wait (ollama_tap/attempts.py), tokens shorter than
MIN_TOKEN are refused at start-up, and the token is never logged (the access log prints
no query string; ollama_tap/logs.py keeps aiohttp's parse errors from quoting requests). A
token file beside the database is trusted only if this user owns it and nobody else may
read it. Nothing under /_tap is ever forwarded to Ollama, however it is spelled.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Final, Protocol

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from ollama_tap.attempts import FailedAttempts
from ollama_tap.config import ConfigError, Settings
from ollama_tap.dbfile import check as check_db_file
from ollama_tap.sessions import LIFETIME, Sessions

log = structlog.get_logger("ollama_tap.auth")

PREFIX: Final = "/_tap"
OPEN_PATHS: Final = frozenset({"/_tap/healthz", PREFIX})
COOKIE: Final = "ollama_tap_session"
COOKIE_PATH: Final = PREFIX + "/"
NONE: Final = "none"
MIN_TOKEN: Final = 16
"""Shortest admin token accepted: it guards every recording."""
MAKE_TOKEN: Final = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
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
        return _strong(settings.admin_token, "--admin-token (OLLAMA_TAP_ADMIN_TOKEN)")
    if isinstance(settings.db, Path):
        check_db_file(settings.db)  # the token goes beside it: never beside a device
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
        try:
            token = f.read().strip()
        except OSError as exc:  # a directory opens, and fails to read
            raise ConfigError(f"cannot read {path} ({exc.strerror}); delete it to have a new "
                              "admin token made") from None  # fmt: skip
    if not token:
        raise ConfigError(f"{path} is empty; delete it to have a new admin token made")
    return _strong(token, f"the token in {path}")


def _strong(token: str, source: str) -> str:
    if len(token) < MIN_TOKEN:
        raise ConfigError(
            f"{source} has {len(token)} characters; an admin token needs at least {MIN_TOKEN} "
            f"(it guards every recording). Make one with `{MAKE_TOKEN}` (`make env` writes "
            "one for the compose stack), or give none to have one generated and kept "
            "beside the database."
        )
    return token


def matches(given: str | None, token: str) -> bool:
    """Whether `given` is the token (constant-time)."""
    # surrogateescape: a header's non-UTF-8 bytes (aiohttp keeps them so) must not raise,
    # and the exception's text would carry the credential into the log.
    return given is not None and hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape")
    )


def bearer(request: web.Request) -> str | None:
    """The credential of an `Authorization: Bearer` header, or None."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


SIGN_IN_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ollama-tap: admin token needed</title></head>
<body><h1>ollama-tap needs its admin token</h1>
<p>{why}</p>
<p>Open the inspector link that <code>ollama-tap serve</code> printed
(<code>/_tap/?token=&hellip;</code>) once; this browser then stays signed in for 12 hours.</p>
<p>Lost it? It is kept in the file <code>admin-token</code> beside the database
(<code>ollama-tap serve --help</code> shows where), unless <code>--admin-token</code> or
<code>OLLAMA_TAP_ADMIN_TOKEN</code> set it.</p></body></html>
"""
WHY: Final = {
    "missing": "This browser is not signed in.",
    "wrong": "The token in that link is not this tap's admin token (a tap started with a new "
    "token, or another tap's link?).",
    "stale": "This browser's session has ended: sessions last 12 hours and end when the tap "
    "restarts.",
}
"""Why a browser is refused, in the page's first line: no credential, a wrong token, or a
session cookie the tap no longer knows."""


def _page_wanted(request: web.Request) -> bool:
    # A browser opening a page asks for HTML; fetch() and API clients get the JSON error.
    return "text/html" in request.headers.get("Accept", "")


def _sign_in_page(why: str, status: int, headers: dict[str, str]) -> web.Response:
    text = SIGN_IN_PAGE.format(why=why)
    return web.Response(text=text, content_type="text/html", status=status, headers=headers)


def _unauthorized(request: web.Request, reason: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="ollama-tap"'}
    if _page_wanted(request):
        return _sign_in_page(WHY[reason], 401, headers)
    return web.json_response(
        {
            "error": "ollama-tap: /_tap/ needs the admin token; send 'Authorization: Bearer "
            "<token>' or open /_tap/?token=<token> once in a browser (`ollama-tap serve` "
            "prints it; it is kept in the file admin-token beside the database)."
        },
        status=401,
        headers=headers,
    )


def _too_many(request: web.Request, wait: int) -> web.Response:
    if _page_wanted(request):
        why = f"Too many wrong tokens came from this address: try again in {wait} s."
        return _sign_in_page(why, 429, {"Retry-After": str(wait)})
    return web.json_response(
        {
            "error": f"ollama-tap: too many wrong admin tokens; try again in {wait} s with the "
            "token `ollama-tap serve` printed (it is kept in the file "
            "admin-token beside the database)."
        },
        status=429,
        headers={"Retry-After": str(wait)},
    )


async def tap_not_found(request: web.Request) -> web.Response:
    message = f"ollama-tap: no such path {request.path}; see /_tap/ and /_tap/api/records"
    return web.json_response({"error": message}, status=404)


def _without_token(request: web.Request, session: str | None) -> web.Response:
    """A redirect to the same URL without its `token` parameters, setting the cookie."""
    query = request.rel_url.query.copy()
    query.popall("token")
    clean = request.rel_url.with_query(query)
    response = web.Response(status=303, headers={"Location": str(clean)})
    if session is not None:
        response.set_cookie(
            COOKIE,
            session,
            path=COOKIE_PATH,
            max_age=int(LIFETIME),
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
    return response


class Guard:
    """The token check of /_tap/: the token itself, the sessions it opened, the back-off."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.sessions = Sessions()
        self.attempts = FailedAttempts()
        self.watch = GuessWatch(self.attempts)

    def check(self, request: web.Request) -> web.StreamResponse | None:
        """None when the request may pass, else the reply that refuses or redirects it.

        A right token passes whatever came before it (attempts.py); only wrong ones are
        counted, and they earn the 429."""
        given = request.rel_url.query.get("token") if request.method == "GET" else None
        if given is not None and matches(given, self.token):
            return _without_token(request, self.sessions.open())
        presented = bearer(request)
        if matches(presented, self.token) or self.sessions.valid(request.cookies.get(COOKIE)):
            # Signed in already: a `token` parameter leaves the URL, right or not.
            return None if given is None else _without_token(request, None)
        if given is not None or presented is not None:
            wait = self.watch.failed(request.remote or "")
            if wait is not None:
                return _too_many(request, wait)
        cookie = request.cookies.get(COOKIE)
        reason = "wrong" if given is not None else "stale" if cookie else "missing"
        return _unauthorized(request, reason)


class GuessWatch:
    """Counts wrong tokens (FailedAttempts) and says once a window, in the log, that the
    shared budget was spent: someone is guessing, or a client holds a stale token."""

    def __init__(self, attempts: FailedAttempts) -> None:
        self.attempts = attempts
        self._said_at: float | None = None

    def failed(self, address: str) -> int | None:
        """Count a wrong token from `address`; the Retry-After it earns, or None (401)."""
        wait = self.attempts.failed(address)
        if self.attempts.spent():
            now = time.monotonic()
            if self._said_at is None or now - self._said_at >= self.attempts.window:
                self._said_at = now
                log.warning(
                    "admin_token_failures",
                    within_seconds=self.attempts.window,
                    failures=self.attempts.global_limit,
                    last_address=address,
                )
        return wait


def _own(request: web.Request) -> bool:
    """Whether the router gave the request to one of the proxy's /_tap routes: a spelling
    the router reads differently (`/_tap%2Fapi/records`, whose `%2F` it keeps) reaches
    the catch-all, which forwards to Ollama, with the admin token in its headers."""
    resource = request.match_info.route.resource
    return resource is not None and resource.canonical.startswith(PREFIX)


class Middleware(Protocol):
    """What `web.middleware` functions are: aiohttp's Middleware, returning a coroutine."""

    def __call__(
        self, request: web.Request, handler: Handler
    ) -> Coroutine[Any, Any, web.StreamResponse]: ...


def auth_middleware(token: str | None) -> Middleware:
    """Guard /_tap/* (all but OPEN_PATHS), keep it from the catch-all, and set the security
    headers on its replies."""
    guard = None if token is None else Guard(token)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path  # decoded: `/%5Ftap/…` and `/_tap%2F…` are in the namespace too
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            return await handler(request)
        refused = None if guard is None or path in OPEN_PATHS else guard.check(request)
        if refused is None and not _own(request):
            refused = await tap_not_found(request)
        headers = API_HEADERS if path.startswith(PREFIX + "/api/") else SECURITY_HEADERS
        try:
            response = refused or await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    return middleware

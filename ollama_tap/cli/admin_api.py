"""How `top` and `loads` ask a tap's /_tap/api: which token goes where, and no redirects.

The token a local `serve` keeps (its admin-token file, or OLLAMA_TAP_ADMIN_TOKEN, which is
`serve`'s own setting) opens this machine's recordings, so it goes only to this machine's
tap: a loopback address on the port `serve` is configured with here. Any other URL gets
the token given for it (`--token`, or `--token-file`, which keeps it out of `ps`) or none.
A redirect is never followed: urllib would carry the Authorization header to wherever it
points, another host included.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

import orjson
from yarl import URL

from ollama_tap.config import Settings, is_loopback_host

TOKEN_HELP: Final = (
    "admin token for this --url (visible in `ps`: prefer --token-file) [default: for this "
    "machine's tap only, $OLLAMA_TAP_ADMIN_TOKEN, else the admin-token file serve keeps]"
)


class ApiError(Exception):
    """The tap could not be asked, or refused; the message names the fix."""


def add_options(p: argparse.ArgumentParser, default_url: str) -> None:
    p.add_argument("--url", default=default_url, help=f"the tap [default: {default_url}]")
    p.add_argument("--token", help=TOKEN_HELP)
    p.add_argument("--token-file", type=Path, help="read the admin token from this file")


def base_url(given: str) -> URL:
    """`given` as an http(s) URL with a host; ApiError naming the fix otherwise."""
    try:
        url = URL(given)
    except ValueError as exc:
        raise ApiError(
            f"--url {given!r} is not a URL ({exc}); e.g. http://127.0.0.1:11435"
        ) from None
    if url.scheme not in {"http", "https"} or not url.host:
        raise ApiError(f"--url {given!r} must be http:// or https:// and a host, e.g. "
                       "http://127.0.0.1:11435")  # fmt: skip
    return url


def local(url: URL) -> bool:
    """Whether `url` is this machine's tap: a loopback host on the port `serve` uses here."""
    with contextlib.suppress(ValueError):
        return is_loopback_host(url.host or "") and url.port == Settings.model_validate({}).port
    return False


def token_for(url: URL, args: argparse.Namespace) -> str | None:
    """The token to send to `url`: the one given for it, else the local one if local."""
    if args.token:
        return str(args.token)
    if args.token_file is not None:
        try:
            return args.token_file.read_text().strip() or None
        except OSError as exc:
            raise ApiError(f"cannot read --token-file {args.token_file} ({exc.strerror})") from None
    if not local(url):
        return None
    if env := os.environ.get("OLLAMA_TAP_ADMIN_TOKEN"):
        return None if env == "none" else env
    # auth.token_file's place; auth itself is not imported, it loads the server stack. A
    # bad OLLAMA_TAP_* value (a ValueError) means no local token, as an unreadable file.
    with contextlib.suppress(OSError, ValueError):
        path = Settings.model_validate({}).db_path.parent / "admin-token"
        return path.read_text().strip() or None
    return None


def warn_in_clear(command: str, url: URL, token: str | None) -> None:
    """Say on stderr that a token is about to cross the network in clear (http:// to a
    host that is not this machine): https:// is the fix, or a tunnel."""
    if token and url.scheme == "http" and not is_loopback_host(url.host or ""):
        print(
            f"ollama-tap {command}: warning: the admin token goes to {url.host} over plain "
            "HTTP, readable on the way; prefer https:// (docs/security.md)",
            file=sys.stderr,
        )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


_OPENER: Final = urllib.request.build_opener(_NoRedirects)


def get_json(url: URL, path: str, token: str | None, timeout: float) -> Any:
    """GET `path` of the tap at `url` with `token`; its JSON, or ApiError naming the fix."""
    request = urllib.request.Request(str(url.with_query(None)).rstrip("/") + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            return orjson.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise ApiError(_refusal(url, exc, token)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(f"cannot reach {url} ({reason}); is `ollama-tap serve` running? "
                       "(--url)") from None  # fmt: skip


def _refusal(url: URL, exc: urllib.error.HTTPError, token: str | None) -> str:
    if 300 <= exc.code < 400:
        return (
            f"{url} answered a redirect ({exc.code}) to {exc.headers.get('Location')}, "
            "which is not followed (it would carry the admin token); give that URL as --url"
        )
    if exc.code == 401 and token is None and not local(url):
        return (
            f"{url} needs its admin token, and this machine's is sent to this machine's tap "
            "only; pass --token-file (or --token) for that tap"
        )
    if exc.code == 401:
        return (
            f"{url} refused the admin token; pass --token-file or --token "
            "(`ollama-tap serve` prints it)"
        )
    try:
        detail = orjson.loads(exc.read() or b"{}").get("error", exc.reason)
    except (orjson.JSONDecodeError, AttributeError):
        detail = exc.reason
    return f"{url} answered {exc.code}: {detail}; is it ollama-tap? (--url)"

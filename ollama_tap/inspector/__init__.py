"""The inspector page: GET /_tap/ and its static files, served from ollama_tap/inspector/static/.

No build step: plain HTML, CSS and ES modules (the records, the Now view) that read the JSON
API. The auth middleware (ollama_tap/auth.py) guards these routes and adds the CSP and
nosniff headers; the page therefore loads nothing inline and nothing from another origin.
The files are read once, when the routes are added, so no request reads the disk on the event loop;
only names found then are ever served, which rules out path traversal by construction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiohttp import web

STATIC: Final = Path(__file__).parent / "static"
INDEX: Final = "index.html"
CONTENT_TYPES: Final = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
"""The only file types served: with nosniff, a browser runs a script or applies a style
sheet only when its Content-Type says so."""


@dataclass(frozen=True, slots=True)
class Asset:
    """One static file, kept in memory with its validator."""

    body: bytes
    content_type: str
    etag: str


def load_assets(directory: Path = STATIC) -> dict[str, Asset]:
    """Every file of a served type directly in `directory`, by name."""
    assets: dict[str, Asset] = {}
    for path in sorted(directory.iterdir()):
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        assets[path.name] = Asset(body, content_type, etag)
    return assets


def _reply(request: web.Request, asset: Asset) -> web.Response:
    # no-cache: the browser may keep a copy but revalidates it (a cheap 304 by ETag), so an
    # upgraded proxy never runs against a stale page.
    headers = {"Cache-Control": "no-cache", "ETag": asset.etag}
    if asset.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    return web.Response(
        body=asset.body, content_type=asset.content_type, charset="utf-8", headers=headers
    )


def add_routes(app: web.Application) -> None:
    """GET /_tap/ (the page), GET /_tap (redirect there), GET /_tap/static/{name}.

    Call it before the /_tap/{tail} and relay catch-alls are added: aiohttp tries the
    routes under one prefix in the order they were added.
    """
    assets = load_assets()

    async def index(request: web.Request) -> web.Response:
        return _reply(request, assets[INDEX])

    async def bare(request: web.Request) -> web.Response:
        # The query goes along: /_tap?token=… signs in at /_tap/, where the cookie applies.
        target = request.rel_url.with_path("/_tap/").with_query(request.rel_url.query)
        # Not cached: the target may carry the token.
        raise web.HTTPPermanentRedirect(target, headers={"Cache-Control": "no-store"})

    async def static(request: web.Request) -> web.Response:
        asset = assets.get(request.match_info["name"])
        if asset is None:
            raise web.HTTPNotFound(text="no such file in the ollama-tap inspector")
        return _reply(request, asset)

    app.router.add_get("/_tap/", index)
    app.router.add_get("/_tap", bare)
    app.router.add_get("/_tap/static/{name}", static)

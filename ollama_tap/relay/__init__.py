"""The data path: how bytes move between the app and Ollama, on one of two transports.

What `http1/serves.py` accepts goes through `http1/` (llhttp on both sides, the default,
`relay = "fast"`); everything else, and everything under `relay = "aiohttp"`, goes through
`aiohttp_relay.py`. Both hold a `tap.Tapped` per exchange, which fills the Exchange and fires
the hooks; `headers.py` has the header rules both follow (docs/architecture.md).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web

from ollama_tap.config import Settings
from ollama_tap.hooks import Hooks
from ollama_tap.relay.aiohttp_relay import SESSION, AiohttpTransport, make_session, relay_session
from ollama_tap.relay.headers import MAX_FIELD
from ollama_tap.relay.http1 import clients
from ollama_tap.relay.http1.clients import raise_fd_limit
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.server import Front
from ollama_tap.relay.http1.serves import OwnedPaths, Rule
from ollama_tap.relay.http1.site import FrontSite
from ollama_tap.relay.tap import Tap

__all__ = [
    "FRONT",
    "SESSION",
    "TAP",
    "install",
    "make_session",
    "make_site",
    "raise_fd_limit",
    "server_args",
]

TAP: Final = web.AppKey("tap", Tap)
FRONT: Final = web.AppKey("front", Front)
"""The HTTP/1 transport's server (relay = "fast"); absent with the aiohttp transport."""


def server_args() -> dict[str, Any]:
    """aiohttp's server as the front is, for the connections handed to it (and all of them
    under relay = "aiohttp"): the same field limit, and the same cut of a connection idle,
    or whose next head is still arriving, for KEEPALIVE_SECONDS (aiohttp's own default
    keeps one for an hour)."""
    return {"max_field_size": MAX_FIELD, "keepalive_timeout": clients.KEEPALIVE_SECONDS}


def install(app: web.Application, settings: Settings, hooks: Hooks) -> Tap:
    """Set up the data path: the driver, the transport(s), the catch-all route and shutdown.

    Called last: the catch-all route must follow the proxy's own, and the HTTP/1
    transport's rule reads the proxy's own paths from the router as it is then.
    """
    tap = app[TAP] = Tap(settings, hooks)
    if settings.relay == "fast":
        pool = UpstreamPool(settings.upstream_url, settings.connect_timeout, settings.read_timeout)
        rule = Rule(OwnedPaths(app.router), check_host=settings.loopback_bind)
        app[FRONT] = Front(tap, pool, rule)

        async def close_pool(_: web.Application) -> None:
            pool.close()  # after in-flight exchanges ended (cleanup follows shutdown)

        app.on_cleanup.append(close_pool)
    app.on_shutdown.append(_shut_down)
    transport = AiohttpTransport(tap, app)

    async def relay_client(_: web.Application) -> AsyncIterator[None]:
        transport.session = relay_session()
        yield
        await transport.session.close()

    app.cleanup_ctx.append(relay_client)
    app.router.add_route("*", "/{tail:.*}", transport.handle)
    return tap


async def _shut_down(app: web.Application) -> None:
    grace = app[TAP].settings.shutdown_grace
    app[TAP].shut_down(grace)
    if FRONT in app:
        # The front's exchanges are not aiohttp's handlers, which the runner waits for:
        # they are waited for here, before the recorder is stopped in cleanup.
        app[FRONT].clients.close_idle()
        await app[FRONT].clients.wait_exchanges(grace + 5)


def make_site(
    runner: web.AppRunner, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.TCPSite:
    """The listening site: the HTTP/1 transport's when the app has one, else aiohttp's."""
    app = runner.app
    if FRONT in app:
        return FrontSite(runner, app[FRONT], host, port, ssl_context=ssl_context)
    return web.TCPSite(runner, host, port, ssl_context=ssl_context)

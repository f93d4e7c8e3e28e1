"""The data path: how bytes move between the app and Ollama.

One transport carries every Ollama request: `http1/` (llhttp on both sides). Its server owns
the listening socket and gives aiohttp's server only the requests for the proxy's own paths
(/_tap/, the metrics path), one per connection. `tap.py` drives each exchange, fills the
Exchange and fires the hooks; `headers.py` has the header rules (docs/architecture.md).
"""

from __future__ import annotations

import ssl
from typing import Any, Final

from aiohttp import hdrs, web

from ollama_tap.boxes.fleet import Boxes
from ollama_tap.config import Settings
from ollama_tap.hooks import Hooks
from ollama_tap.relay.headers import MAX_FIELD
from ollama_tap.relay.http1.clients import raise_fd_limit
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.server import Front
from ollama_tap.relay.http1.serves import OwnedPaths, Rule
from ollama_tap.relay.http1.site import FrontSite
from ollama_tap.relay.tap import Tap

__all__ = ["FRONT", "TAP", "install", "make_site", "raise_fd_limit", "server_args"]

TAP: Final = web.AppKey("tap", Tap)
FRONT: Final = web.AppKey("front", Front)
"""The HTTP/1 server: it owns the listening socket."""


def server_args() -> dict[str, Any]:
    """aiohttp's server, for the proxy's own paths: the field limit the front keeps."""
    return {"max_field_size": MAX_FIELD}


def install(app: web.Application, settings: Settings, hooks: Hooks, boxes: Boxes) -> Tap:
    """Set up the data path: the driver, the HTTP/1 server, a pool per box and shutdown.

    Called last: the front's rule reads the proxy's own paths from the router as it is then.
    """
    tap = app[TAP] = Tap(settings, hooks, boxes)
    pools = {
        b.name: UpstreamPool(b.url, settings.connect_timeout, settings.read_timeout)
        for b in boxes.boxes
    }
    rule = Rule(OwnedPaths(app.router), check_host=settings.loopback_bind)
    app[FRONT] = Front(tap, pools, rule)

    async def close_pool(_: web.Application) -> None:
        for pool in pools.values():
            pool.close()  # after in-flight exchanges ended (cleanup follows shutdown)

    app.on_cleanup.append(close_pool)
    app.on_shutdown.append(_shut_down)
    app.on_response_prepare.append(_last_on_its_connection)
    return tap


async def _last_on_its_connection(_: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's server answers one request per connection (the front handed it over) and
    closes it: a later request on it would never reach the front, which relays Ollama's."""
    response.force_close()
    response.headers[hdrs.CONNECTION] = "close"


async def _shut_down(app: web.Application) -> None:
    grace = app[TAP].settings.shutdown_grace
    app[TAP].shut_down(grace)
    # The front's exchanges are not aiohttp's handlers, which the runner waits for: they
    # are waited for here, before the recorder is stopped in cleanup.
    app[FRONT].clients.close_idle()
    await app[FRONT].clients.wait_exchanges(grace + 5)


def make_site(
    runner: web.AppRunner, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.TCPSite:
    """The listening site: aiohttp's TCPSite with the HTTP/1 server as its protocol."""
    return FrontSite(runner, runner.app[FRONT], host, port, ssl_context=ssl_context)

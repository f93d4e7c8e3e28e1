"""The data path: how bytes move between the app and Ollama.

One transport carries every Ollama request: `http1/` (llhttp on both sides). Its server owns
the listening socket and gives aiohttp's server only the requests for the proxy's own paths
(/_tap/, the metrics path), one per connection. `tap.py` drives each exchange, fills the
Exchange and fires the hooks; `headers.py` has the header rules (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Final

import structlog
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
from ollama_tap.relay.tapped import Guard

__all__ = ["FRONT", "TAP", "install", "make_site", "raise_fd_limit", "server_args"]

log = structlog.get_logger("ollama_tap.front")

TAP: Final = web.AppKey("tap", Tap)
FRONT: Final = web.AppKey("front", Front)
"""The HTTP/1 server: it owns the listening socket."""


OWN_BODY_SECONDS: Final = 10.0
"""The proxy's own paths read no request body: aiohttp's server takes the rest of one for
this long after its answer (its `lingering_time`), then closes the connection."""


def server_args() -> dict[str, Any]:
    """aiohttp's server, for the proxy's own paths: the field limit the front keeps, and
    how long an unread request body may take to end."""
    return {"max_field_size": MAX_FIELD, "lingering_time": OWN_BODY_SECONDS}


def install(
    app: web.Application,
    settings: Settings,
    hooks: Hooks,
    boxes: Boxes,
    guard: Guard | None = None,
) -> Tap:
    """Set up the data path: the driver, the HTTP/1 server, a pool per box and shutdown;
    `guard` is the reload guard when it is on.

    Called last: the front's rule reads the proxy's own paths from the router as it is then.
    """
    tap = app[TAP] = Tap(settings, hooks, boxes, guard)
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


async def _last_on_its_connection(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's server answers one request per connection (the front handed it over) and
    closes it: a later request on it would never reach the front, which relays Ollama's.
    A request body still coming is watched (`_body_ended`)."""
    response.force_close()
    response.headers[hdrs.CONNECTION] = "close"
    if request.body_exists and not request.content.is_eof():
        # Just past aiohttp's lingering: by then the body ended or the connection was cut.
        asyncio.get_running_loop().call_later(
            OWN_BODY_SECONDS + 1, _body_ended, request.app[FRONT], request
        )


def _body_ended(front: Front, request: web.Request) -> None:
    """A body sent to the proxy's own path that had not ended when aiohttp's server gave up
    on it: counted and logged as the front's stalled bodies are."""
    if not request.content.is_eof():
        front.body_timeouts += 1
        log.info(
            "front_body_timeout",
            error=f"the request body had not ended {OWN_BODY_SECONDS:g} s after the answer",
            path=request.path,
        )


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

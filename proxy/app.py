"""make_app(settings, registry) -> the aiohttp Application, and its lifecycle."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterable

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from proxy import auth
from proxy.accesslog import AccessLog
from proxy.config import Settings
from proxy.fastrelay import FastRelay, UpstreamPool
from proxy.fastrelay.front import MAX_FIELD, Front
from proxy.fastrelay.frontrelay import FrontRelay
from proxy.fastrelay.site import FrontSite
from proxy.forward import Forwarder, MakeRelay
from proxy.hooks import Hooks
from proxy.hostcheck import host_check, local_addresses
from proxy.inspector import add_routes as add_inspector_routes
from proxy.metrics import MetricsObserver, metrics_handler
from proxy.names import ModelLabels
from proxy.recorder import Recorder
from proxy.recorder.api import add_routes as add_recorder_routes
from proxy.tokens.store import ModelStore
from proxy.tokens.vocab import Vocab, VocabCache, VocabSource
from proxy.upstream import UpstreamPoller

SETTINGS = web.AppKey("settings", Settings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
HOOKS = web.AppKey("hooks", Hooks)
SESSION = web.AppKey("session", aiohttp.ClientSession)
POLLER = web.AppKey("poller", UpstreamPoller)
RECORDER = web.AppKey("recorder", Recorder)
SHUTTING_DOWN = web.AppKey("shutting_down", list[bool])
FORWARDER = web.AppKey("forwarder", Forwarder)
ADMIN_TOKEN = web.AppKey("admin_token", str)
FRONT = web.AppKey("front", Front)
"""The listening socket's own server (relay = "fast"); absent with the aiohttp relay."""
VOCABS = web.AppKey("vocabs", VocabCache)
"""Vocabularies by model digest, for the read API's decoded `context` (never the hot path)."""


def make_session() -> aiohttp.ClientSession:
    """The one upstream client: transparent by construction.

    No headers of its own (the client's are relayed as they are), no decompression, no
    cookie jar, no proxy from the environment, and no connection cap (a cap would queue
    requests where nobody can see them; Ollama has its own queue and reports it).
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        # A reply header up to what the proxy's server accepts from clients (the fast
        # relay's parser has no limit of its own), not aiohttp's 8,190 bytes.
        max_field_size=MAX_FIELD,
    )


def _vocab_cache(app: web.Application, settings: Settings) -> VocabCache:
    """Vocabularies (issue 5, decoded `context`): from the local model store when it is on
    this disk, else from the upstream's /api/show."""
    store, upstream = ModelStore.on_this_disk(), settings.upstream_url

    async def load(model: str, digest: str | None) -> Vocab:
        # The upstream session exists only once the app has started (cleanup_ctx), so the
        # source is made per load; loads are rare, the cache keeps what it loaded.
        return await VocabSource(app[SESSION], upstream, store).load(model, digest)

    return VocabCache(load)


async def _upstream_session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = make_session()
    yield
    await app[SESSION].close()


async def _poller(app: web.Application) -> AsyncIterator[None]:
    await app[POLLER].start()
    yield
    await app[POLLER].stop()


async def _recorder(app: web.Application) -> AsyncIterator[None]:
    await app[RECORDER].start()
    yield
    # Runs after in-flight handlers ended (finished, or cancelled as `shutdown`), so every
    # exchange has been handed to the recorder by now; stop() drains the queue.
    await app[RECORDER].stop()


def _fast_relay(
    app: web.Application, settings: Settings
) -> tuple[MakeRelay, MakeRelay, UpstreamPool]:
    """The fast relay for requests aiohttp's server parsed, and the front's relay, sharing
    one upstream connection pool, closed with the app after in-flight exchanges ended."""
    pool = UpstreamPool(settings.upstream_url, settings.connect_timeout, settings.read_timeout)

    async def close(_: web.Application) -> None:
        pool.close()

    app.on_cleanup.append(close)
    return (
        lambda fwd, request, ex: FastRelay(fwd, request, ex, pool),
        lambda fwd, request, ex: FrontRelay(fwd, request, ex, pool),
        pool,
    )


async def _mark_shutdown(app: web.Application) -> None:
    app[SHUTTING_DOWN][0] = True
    grace = app[SETTINGS].shutdown_grace
    app[FORWARDER].cancel_after(grace)
    if FRONT in app:
        # The front's exchanges are not aiohttp's handlers, which the runner waits for:
        # they are waited for here, before the recorder is stopped in cleanup.
        app[FRONT].close_idle()
        await app[FRONT].wait_exchanges(grace + 5)


def make_site(
    runner: web.AppRunner, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.TCPSite:
    """The listening site: the front when the app has one (relay = "fast"), else aiohttp's."""
    app = runner.app
    if FRONT in app:
        return FrontSite(runner, app[FRONT], host, port, ssl_context=ssl_context)
    return web.TCPSite(runner, host, port, ssl_context=ssl_context)


async def healthz(request: web.Request) -> web.Response:
    up = request.app[POLLER].up
    return web.json_response({"upstream": "up" if up else "down"})


async def tap_not_found(request: web.Request) -> web.Response:
    message = f"ollama-tap: no such path {request.path}; see /_tap/ and /_tap/api/records"
    return web.json_response({"error": message}, status=404)


def make_app(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    observers: Iterable[object] = (),
) -> web.Application:
    """Build the proxy: observers, routes, middlewares and lifecycle, all from `settings`.

    `observers` are added after the built-in ones (metrics, recorder, access log).
    """
    registry = registry if registry is not None else CollectorRegistry()
    local_addresses()  # resolved now, not on the event loop at the first foreign Host
    token = auth.admin_token(settings)
    middlewares = [host_check] if settings.loopback_bind else []
    middlewares.append(auth.auth_middleware(token))
    app = web.Application(middlewares=middlewares, handler_args={"max_field_size": MAX_FIELD})
    app[SETTINGS] = settings
    app[REGISTRY] = registry
    app[SHUTTING_DOWN] = [False]
    if token is not None:
        app[ADMIN_TOKEN] = token

    labels = ModelLabels(settings.model_label_cap)
    poller = UpstreamPoller(settings, registry, labels)
    recorder = Recorder(settings, registry, digest_of=poller.digest_of)
    metrics = [MetricsObserver(registry, labels, poller)] if settings.metrics else []
    builtin = [*metrics, recorder, AccessLog()]
    hooks = Hooks([*builtin, *observers], registry)
    app[POLLER], app[RECORDER], app[HOOKS] = poller, recorder, hooks
    app[VOCABS] = _vocab_cache(app, settings)

    app.cleanup_ctx.extend([_upstream_session, _poller, _recorder])
    app.on_shutdown.append(_mark_shutdown)

    fast = _fast_relay(app, settings) if settings.relay == "fast" else None
    forwarder = Forwarder(
        settings,
        hooks,
        session=lambda: app[SESSION],
        shutting_down=lambda: app[SHUTTING_DOWN][0],
        make_relay=fast[0] if fast else None,
    )
    app[FORWARDER] = forwarder
    if fast is not None:
        app[FRONT] = Front(settings, forwarder, fast[1], fast[2])
    app.router.add_get("/_tap/healthz", healthz)
    if settings.metrics:
        app.router.add_get(settings.metrics_path, metrics_handler(registry))
    add_recorder_routes(app, recorder, vocabs=app[VOCABS].get)
    add_inspector_routes(app)
    # /_tap/ is the proxy's own namespace: an unknown path there is never Ollama's business.
    app.router.add_route("*", "/_tap/{tail:.*}", tap_not_found)
    # Last: everything else, any method, goes to Ollama.
    app.router.add_route("*", "/{tail:.*}", forwarder.handle)
    return app

"""make_app(settings, registry) -> the aiohttp Application, and its lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from ollama_tap import auth
from ollama_tap.accesslog import AccessLog
from ollama_tap.advice.api import add_routes as add_advice_routes
from ollama_tap.attribution import ClientNames
from ollama_tap.boxes.fleet import Boxes
from ollama_tap.config import RecordMode, Settings
from ollama_tap.guard import ReloadGuard
from ollama_tap.hooks import Hooks
from ollama_tap.hostcheck import host_check, local_addresses
from ollama_tap.inflight import api as inflight_api
from ollama_tap.inflight import metrics as inflight_metrics
from ollama_tap.inflight.registry import InFlight
from ollama_tap.inspector import add_routes as add_inspector_routes
from ollama_tap.loads.api import add_routes as add_loads_routes
from ollama_tap.loads.tracker import LoadTracker
from ollama_tap.metrics.families import BODY_TIMEOUTS, CONNECTIONS_REFUSED
from ollama_tap.metrics.observer import MetricsObserver, metrics_handler
from ollama_tap.names import ModelLabels
from ollama_tap.otel import Otel
from ollama_tap.otel import start as start_otel
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.api import add_routes as add_recorder_routes
from ollama_tap.relay import FRONT, install, server_args
from ollama_tap.relay.headers import MAX_FIELD
from ollama_tap.relay.http1.clients import REFUSALS
from ollama_tap.tokens.store import ModelStore
from ollama_tap.tokens.vocab import Vocab, VocabCache, VocabSource
from ollama_tap.upstream import UpstreamPoller

SETTINGS = web.AppKey("settings", Settings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
HOOKS = web.AppKey("hooks", Hooks)
POLLER = web.AppKey("poller", UpstreamPoller)
"""The first box's poller (the one upstream's, unless several are named)."""
BOXES = web.AppKey("boxes", Boxes)
RECORDER = web.AppKey("recorder", Recorder)
LOADS = web.AppKey("loads", LoadTracker)
ADMIN_TOKEN = web.AppKey("admin_token", str)
OTEL = web.AppKey("otel", Otel)
VOCABS = web.AppKey("vocabs", VocabCache)
"""Vocabularies by model digest, for the read API's decoded `context` (never the hot path)."""
SESSION = web.AppKey("session", aiohttp.ClientSession)
"""The app's own upstream client: the poller's and the vocabulary loader's (the relay has
its own pool, relay/http1/pool.py)."""


def make_session() -> aiohttp.ClientSession:
    """An upstream client, transparent by construction: no headers of its own, no
    decompression, no cookie jar, no proxy from the environment, no connection cap, and a
    reply header up to what the proxy takes from clients (not aiohttp's 8,190 bytes)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        max_field_size=MAX_FIELD,
    )


def _vocab_cache(app: web.Application, settings: Settings) -> VocabCache:
    """Vocabularies for decoded `context`: from the local model store when it is on this
    disk, else from the upstream's /api/show."""
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
    await app[BOXES].start()
    yield
    await app[BOXES].stop()


async def _recorder(app: web.Application) -> AsyncIterator[None]:
    await app[RECORDER].start()
    yield
    # Runs after in-flight handlers ended (finished, or cancelled as `shutdown`), so every
    # exchange has been handed to the recorder by now; stop() drains the queue.
    await app[RECORDER].stop()


async def _otel(app: web.Application) -> AsyncIterator[None]:
    yield
    # Runs after in-flight handlers ended: every exchange has made its span by now.
    await app[OTEL].close()


class FrontCounts(Collector):
    """The HTTP/1 front's counts, read at scrape time: connections cut for a stalled
    request body, and connections it could not take."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        front = self.app.get(FRONT)
        cut = CounterMetricFamily(BODY_TIMEOUTS.name, BODY_TIMEOUTS.help)
        cut.add_metric([], front.body_timeouts if front is not None else 0)
        yield cut
        refused = CounterMetricFamily(
            CONNECTIONS_REFUSED.name, CONNECTIONS_REFUSED.help, labels=CONNECTIONS_REFUSED.labels
        )
        for reason in REFUSALS:
            refused.add_metric([reason], front.clients.refused[reason] if front is not None else 0)
        yield refused


async def healthz(request: web.Request) -> web.Response:
    boxes = request.app[BOXES]
    found: dict[str, object] = {"upstream": "up" if boxes.up else "down"}
    if boxes.router is not None:
        found["boxes"] = {b.name: "up" if b.poller.up else "down" for b in boxes.boxes}
    return web.json_response(found)


def make_app(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    observers: Iterable[object] = (),
    labels: ModelLabels | None = None,
) -> web.Application:
    """Build the proxy: observers, routes, middlewares and lifecycle, all from `settings`.

    `observers` are added after the built-in ones of their phase (hooks.Phase; one that
    declares none is a sink, after the metrics, recorder, access log and spans); `labels`
    replaces the ModelLabels made from the settings (a test's clock).
    """
    registry = registry if registry is not None else CollectorRegistry()
    local_addresses()  # resolved now, not on the event loop at the first foreign Host
    token = auth.admin_token(settings)
    middlewares = [host_check] if settings.loopback_bind else []
    middlewares.append(auth.auth_middleware(token))
    app = web.Application(middlewares=middlewares, handler_args=server_args())
    app[SETTINGS] = settings
    app[REGISTRY] = registry
    if token is not None:
        app[ADMIN_TOKEN] = token

    labels = labels if labels is not None else ModelLabels(settings.model_label_cap)
    boxes = Boxes(settings, registry, labels)
    poller, loads = boxes.first.poller, boxes.first.loads
    # With one box its poller answers as before; with several, the exchange's box does.
    state = poller if boxes.router is None else boxes
    recorder = Recorder(
        settings,
        registry,
        digest_of=state.digest_of,
        version_of=boxes.version_of,
        spelling=labels.spelling,
    )
    clients = ClientNames(
        settings.client_label_cap, header=settings.client_header, rules=settings.clients
    )
    if boxes.router is not None:
        # A client is an app at an address: its prompt cache is that process's.
        boxes.router.client_of = lambda ex: (
            f"{clients.name_of(ex.request_headers, ex.client)}@{ex.client}"
        )
    inflight = InFlight(labels.label)
    metrics = [MetricsObserver(registry, labels, state, boxes.counted)] if settings.metrics else []
    if metrics:
        clients.on_free(metrics[0].m.forget_client)
        inflight_metrics.register(registry, inflight, boxed=boxes.counted is not None)
        registry.register(FrontCounts(app))
    labels.on_free(lambda model: inflight.forget("model", model))
    clients.on_free(lambda client: inflight.forget("client", client))
    otel = start_otel(settings, registry, labels, state.context_length)
    traced = otel.observers if otel is not None else []
    # With several boxes the guard asks the routed box's tracker (relay/tapped.py, guard_for).
    guard = ReloadGuard(loads, registry, labels) if settings.reload_guard else None
    if guard is not None and boxes.router is not None:
        boxes.router.spared = guard.spares  # a reload it spares is no reload to the router
    # Hooks orders them by the phase each declares (names, analysis, sinks: hooks.Phase).
    builtin = [
        clients,
        labels,
        inflight,
        *boxes.observers(),
        *metrics,
        recorder,
        AccessLog(labels.label),
        *traced,
        *([guard] if guard is not None else []),
    ]
    hooks = Hooks([*builtin, *observers], registry)
    app[POLLER], app[RECORDER], app[HOOKS], app[LOADS] = poller, recorder, hooks, loads
    app[BOXES] = boxes
    app[VOCABS] = _vocab_cache(app, settings)

    app.cleanup_ctx.extend([_upstream_session, _poller, _recorder])
    if otel is not None:
        app[OTEL] = otel
        app.cleanup_ctx.append(_otel)
    app.router.add_get("/_tap/healthz", healthz)
    if settings.metrics:
        app.router.add_get(settings.metrics_path, metrics_handler(registry))
    add_recorder_routes(app, recorder, vocabs=app[VOCABS].get)
    trackers = [b.loads for b in boxes.boxes]
    add_loads_routes(app, trackers, with_client=settings.record_mode is RecordMode.FULL)
    add_advice_routes(app, recorder, lambda: app[SESSION], settings.upstream_url)
    inflight_api.add_routes(app, inflight)
    add_inspector_routes(app)
    # /_tap/ is the proxy's own namespace: an unknown path there is never Ollama's business.
    app.router.add_route("*", "/_tap/{tail:.*}", auth.tap_not_found)
    install(app, settings, hooks, boxes, guard)  # last: everything else, any method, goes to Ollama
    return app

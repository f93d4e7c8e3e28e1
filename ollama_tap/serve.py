"""`ollama-tap serve`: run the app with a bounded, graceful shutdown."""

from __future__ import annotations

import asyncio
import errno
import gc
import signal
import ssl
import sys
from pathlib import Path

import structlog
from aiohttp import web

from ollama_tap import compiled, logs, ports
from ollama_tap.app import ADMIN_TOKEN, make_app
from ollama_tap.config import ConfigError, RecordMode, Settings, all_loopback, bind_addresses
from ollama_tap.credentials import redacted_url
from ollama_tap.relay import FRONT, TAP, make_site, raise_fd_limit
from ollama_tap.relay.http1.clients import accept_failures
from ollama_tap.relay.tap import Tap
from ollama_tap.terminal import plural


def _loop() -> asyncio.AbstractEventLoop:
    # uvloop makes the per-chunk relay cheaper (see bench/overhead.py); plain asyncio works too.
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _ssl(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"cannot load --tls-cert {settings.tls_cert} with --tls-key {settings.tls_key} "
            f"({getattr(exc, 'reason', None) or exc.strerror or exc}); give a PEM certificate "
            "and its private key"
        ) from None
    return context


def banner(settings: Settings, token: str | None) -> str:
    scheme = "https" if settings.tls_cert else "http"
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = f"{scheme}://{host}:{settings.port}"
    inspector = f"{base}/_tap/?token={token}" if token else f"{base}/_tap/"
    recording = (
        "off (nothing is kept; --record full or metadata to record)"
        if settings.record_mode is RecordMode.OFF
        else f"{settings.record_mode} -> {shown_location(settings)} as {settings.instance_name}"
    )
    # The one setting that changes what Ollama receives is said where the operator looks.
    guard = (
        "  reload guard: on (a smaller num_ctx goes as the loaded model's; docs/transparency.md)\n"
        if settings.reload_guard
        else ""
    )
    ollama = (
        ", ".join(f"{b.name}={b.url}" for b in settings.boxes)
        if settings.named_boxes
        else str(settings.upstream_url)
    )
    return (
        f"ollama-tap {base} -> Ollama {ollama}\n"
        f"  metrics:   {base}{settings.metrics_path}\n"
        f"  inspector: {inspector}\n"
        f"  recording: {recording}\n"
        f"{guard}"
        f"  build:     {build_kind()}"
    )


def shown_location(settings: Settings) -> str:
    """Where records go, as printed: a PostgreSQL URL without its password."""
    location = settings.db_location
    return str(location) if isinstance(location, Path) else redacted_url(location)


def build_kind() -> str:
    """Said at start-up: an install without a C compiler falls back to plain Python, and pip
    shows no build output unless asked."""
    if compiled.active():
        return "compiled"
    return "interpreted (no compiled modules; see README, Installing)"


def serve(settings: Settings) -> int:
    """Serve until SIGINT/SIGTERM, then shut down in phases and return 0.

    The banner follows the bind, so a start that fails prints only why. Shutdown phases
    (aiohttp's runner): stop accepting connections; mark the app as shutting down; let
    in-flight exchanges run on for `shutdown_grace` seconds, or until a second signal;
    cancel what is left (recorded with outcome `shutdown`, by the relay's driver); close the
    upstream session, the poller and the recorder, which drains its queue to disk.
    """
    logs.configure(settings.log_level, settings.log_format)
    tls = _ssl(settings)  # before anything starts: a bad certificate is one line
    raise_fd_limit()  # before make_app: the front's connection cap follows from the limit
    app = make_app(settings)
    with asyncio.Runner(loop_factory=_loop) as runner:
        runner.run(_run(app, settings, tls))
    return 0


def _announce(app: web.Application, settings: Settings) -> None:
    """The banner and the log's first line, once the port is bound."""
    print(banner(settings, app.get(ADMIN_TOKEN)), file=sys.stderr, flush=True)
    structlog.get_logger("ollama_tap").info(
        "listening",
        host=settings.host,
        port=settings.port,
        upstream=str(settings.upstream_url),
        **({"boxes": [b.name for b in settings.boxes]} if settings.named_boxes else {}),
    )


def _stopping(tap: Tap, grace: float) -> None:
    """Say what the shutdown waits for, and make a second signal cut it short."""
    waiting = tap.in_flight()
    if waiting:
        print(
            f"ollama-tap: waiting up to {grace:g} s for {plural(waiting, 'request')} in "
            "flight; Ctrl-C again to stop now",
            file=sys.stderr,
            flush=True,
        )

    def now() -> None:
        cut = tap.in_flight()
        if cut:
            print(
                f"ollama-tap: stopping now; {plural(cut, 'request')} cut, recorded as shutdown",
                file=sys.stderr,
                flush=True,
            )
        tap.stop_now()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, now)


def _check_bound(settings: Settings, bound: list[str]) -> None:
    """The Host rule, the record mode and `--admin-token none` were decided from the
    addresses `--host` resolved to; the sockets bound must be as loopback as those were."""
    if all_loopback(bound) != settings.loopback_bind:
        raise ConfigError(
            f"--host {settings.host} was bound to {', '.join(bound)} but resolved to "
            f"{', '.join(bind_addresses(settings.host))} a moment before; give an IP address."
        )


async def _run(app: web.Application, settings: Settings, tls: ssl.SSLContext | None) -> None:
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        # The relay's driver cancels what is left when the grace period ends (see
        # Tap.shut_down); aiohttp's own timeout is only the backstop.
        shutdown_timeout=settings.shutdown_grace + 5,
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(accept_failures(app[FRONT].clients, loop.get_exception_handler()))
    try:
        try:
            await make_site(runner, settings.host, settings.port, tls).start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            # Taken since the check before start-up.
            raise ConfigError(ports.in_use_message(settings.host, settings.port)) from None
        _check_bound(settings, [str(address[0]) for address in runner.addresses])
        _announce(app, settings)
        # Everything made so far (modules, the app, the registry) lives as long as the
        # process: out of the collector's sight, a full collection under many held streams
        # walks far fewer objects and stalls every stream for less.
        gc.collect()
        gc.freeze()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        _stopping(app[TAP], settings.shutdown_grace)
    finally:
        await runner.cleanup()

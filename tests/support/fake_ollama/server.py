"""FakeOllama: the fake's routes on an aiohttp app, behind Ollama's Host and Origin checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from tests.support.fake_ollama.access import host_allowed, origin_allowed
from tests.support.fake_ollama.anthropic import ROUTES as ANTHROPIC_ROUTES
from tests.support.fake_ollama.anthropic import anthropic_error
from tests.support.fake_ollama.engine import Engine, Handler, Route
from tests.support.fake_ollama.incoming import RECEIVED, Received
from tests.support.fake_ollama.manage import ROUTES as MANAGEMENT_ROUTES
from tests.support.fake_ollama.native import ROUTES as NATIVE_ROUTES
from tests.support.fake_ollama.native import native_error
from tests.support.fake_ollama.openai import ROUTES as OPENAI_ROUTES
from tests.support.fake_ollama.openai import openai_error
from tests.support.fake_ollama.replies import ErrorReply, Refused
from tests.support.fake_ollama.responses import ROUTES as RESPONSES_ROUTES

_FAMILIES: list[tuple[list[Route], ErrorReply]] = [
    (NATIVE_ROUTES + MANAGEMENT_ROUTES, native_error),
    (OPENAI_ROUTES + RESPONSES_ROUTES, openai_error),
    (ANTHROPIC_ROUTES, anthropic_error),
]
"""Every route, with the error shape of its family."""


class FakeOllama(Engine):
    """An Ollama look-alike on aiohttp: state is public so tests can arrange and inspect it."""

    def __init__(self, *, loopback_host_check: bool = True) -> None:
        super().__init__()
        self.loopback_host_check = loopback_host_check
        self.received: list[Received] = []
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._gate], client_max_size=1 << 30)
        app.on_response_prepare.append(_drop_server_header)
        for routes, error in _FAMILIES:
            for methods, path, handler in routes:
                for method in methods.split():
                    app.router.add_route(method, path, self._refusals(handler, error))
        return app

    def _refusals(
        self, handler: Handler, error: ErrorReply
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Render a `Refused` raised by a handler in its route family's error shape."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(self, request)
            except Refused as refused:
                return await error(request, refused.status, refused.message)

        return guarded

    @web.middleware
    async def _gate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Record the request, apply Ollama's Origin and Host checks, and answer unknown
        paths and methods with the bodies of Go's router."""
        received = Received(
            request.method,
            request.path_qs,
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers],
        )
        self.received.append(received)
        request[RECEIVED] = received
        host = request.headers.get("Host", "")
        origin = request.headers.get("Origin")
        if origin is not None and not origin_allowed(origin, host):
            return web.Response(status=403)
        if self.loopback_host_check and not host_allowed(host):
            return web.Response(status=403)
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as exc:
            allow = ", ".join(sorted(exc.allowed_methods))
            return web.Response(
                status=405,
                body=b"405 method not allowed",
                headers={"Content-Type": "text/plain", "Allow": allow},
            )
        except web.HTTPNotFound:
            return web.Response(
                status=404, body=b"404 page not found", headers={"Content-Type": "text/plain"}
            )


async def _drop_server_header(request: web.Request, response: web.StreamResponse) -> None:
    # Ollama (Go net/http) sends no Server header; aiohttp would add one.
    response.headers.pop("Server", None)

"""The listening site of the HTTP/1 transport: aiohttp's TCPSite with the front as protocol.

Plain Python, not compiled: it derives from aiohttp's class. It reads TCPSite's private
attributes `_runner`, `_host`, `_port`, `_ssl_context`, `_backlog`, `_reuse_address`,
`_reuse_port` and sets `_server` (what BaseSite.start and stop use); aiohttp is pinned
below its next minor version for that, and tests/relay/test_site.py checks each of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from aiohttp import web

from ollama_tap.relay.http1.server import Front


class FrontSite(web.TCPSite):
    """aiohttp's TCPSite with the front as the listening socket's protocol factory."""

    def __init__(self, runner: web.BaseRunner, front: Front, *args: Any, **kwargs: Any) -> None:
        super().__init__(runner, *args, **kwargs)
        self._front = front

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._front.attach(server)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._front,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        for sock in self._server.sockets:
            # As aiohttp's server: a client that vanished without a word (a laptop closed
            # during a long prefill) is found out by TCP, and its exchange ends. Set on the
            # listening socket, every accepted one inherits it: no call per connection.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

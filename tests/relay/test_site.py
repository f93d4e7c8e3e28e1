"""The private parts of aiohttp the data path relies on are still there (aiohttp is pinned
below its next minor version for them; this says which to check when that pin moves)."""

from __future__ import annotations

import inspect

from aiohttp import web


async def test_tcpsite_keeps_the_attributes_frontsite_reads() -> None:
    runner = web.AppRunner(web.Application())
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=7, reuse_address=True)
        for name in ("_runner", "_host", "_port", "_ssl_context", "_backlog", "_reuse_address"):
            assert hasattr(site, name), name
        assert hasattr(site, "_reuse_port") and hasattr(site, "_server")
        assert (site._runner, site._host, site._backlog) == (runner, "127.0.0.1", 7)
        assert "self._server" in inspect.getsource(web.BaseSite.stop)
    finally:
        await runner.cleanup()

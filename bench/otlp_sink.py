"""An OTLP/HTTP sink for `overhead.py --otel`: takes every export, answers success, keeps
nothing, so the variant it serves pays for building and exporting spans and nothing else.

    python bench/otlp_sink.py PORT
"""

from __future__ import annotations

import sys

from aiohttp import web

EMPTY = b""
"""An ExportTraceServiceResponse (or metrics) with no partial-success field: success."""


async def accept(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=EMPTY, content_type="application/x-protobuf")


def main() -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", accept)
    app.router.add_post("/v1/metrics", accept)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()

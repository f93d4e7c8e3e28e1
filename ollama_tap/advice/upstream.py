"""What Ollama tells of the models to size: /api/ps once, /api/show once per model.

Used by `ollama-tap context` (its own session, to --url) and by GET /_tap/api/context (the
app's session, to the upstream). A failure costs only the estimates: the tallies stand on
the records alone, and the problem is said, not raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

import aiohttp
import orjson
from yarl import URL

from ollama_tap.advice.report import Upstream
from ollama_tap.advice.sizing import KvShape, kv_shape, loaded_rows
from ollama_tap.ollama.names import canonical_model

TIMEOUT: Final = aiohttp.ClientTimeout(total=10, sock_connect=3)
"""An /api/show reads the model's metadata from disk: quick, but not on a busy box."""


class _Unread(Exception):
    pass


async def _json(session: aiohttp.ClientSession, method: str, url: URL, body: Any) -> dict[str, Any]:
    try:
        async with session.request(method, url, json=body, timeout=TIMEOUT) as resp:
            data = orjson.loads(await resp.read())
            if resp.status != 200 or not isinstance(data, dict):
                message = data.get("error") if isinstance(data, dict) else None
                raise _Unread(f"{url.path}: HTTP {resp.status} {message or ''}".strip())
            return data
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
        raise _Unread(f"{url.path}: {exc or type(exc).__name__}") from exc


async def read_upstream(
    session: aiohttp.ClientSession, base: URL, models: Iterable[str]
) -> Upstream:
    """The KV shapes and /api/ps rows of `models` (names as the records have them)."""
    names = sorted({canonical_model(m) or m for m in models})
    try:
        ps = await _json(session, "GET", base / "api/ps", None)
    except _Unread as exc:
        return Upstream({}, {}, f"cannot ask Ollama at {base} ({exc}): no memory estimates")
    loaded = {canonical_model(k) or k: row for k, row in loaded_rows(ps).items()}

    async def shape(name: str) -> KvShape | None:
        try:
            return kv_shape(await _json(session, "POST", base / "api/show", {"model": name}))
        except _Unread:
            return None  # a model deleted since: no estimate for it alone

    shapes = await asyncio.gather(*(shape(n) for n in names))
    return Upstream(dict(zip(names, shapes, strict=True)), loaded)

"""`models list` where no model store is on this disk (Ollama in a container, on another
host, as another user): Ollama's own list, from its /api/tags."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import aiohttp
import orjson
from yarl import URL


class TagsError(Exception):
    """Ollama's list could not be read; the message says why."""


@dataclass(frozen=True)
class Listed:
    """A model as /api/tags reports it (the fields `models list` prints)."""

    name: str
    digest: str
    size: int
    modified: datetime


async def listed(upstream: URL) -> list[Listed]:
    url = upstream / "api" / "tags"
    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise TagsError(f"{url} answered {resp.status}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TagsError(f"cannot reach {url}: {exc or type(exc).__name__}") from None
    try:
        models = orjson.loads(body)["models"]
        return [_one(m) for m in models]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TagsError(f"{url} sent no model list ({exc})") from None


def _one(model: dict[str, object]) -> Listed:
    size = model.get("size")
    return Listed(
        name=str(model["name"]),
        digest=str(model.get("digest") or ""),
        size=size if isinstance(size, int) else 0,
        modified=_time(str(model.get("modified_at") or "")),
    )


def _time(text: str) -> datetime:
    """Go's RFC 3339 with nanoseconds, which datetime reads only to microseconds."""
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else datetime.min

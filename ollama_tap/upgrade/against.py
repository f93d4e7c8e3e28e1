"""`upgrade-check --against URL`: before upgrading, a sample of the box's own recent traffic
re-sent to the new Ollama (run on another port or machine) with `replay send`'s machinery,
and compared as two recorded versions are: the recorded side is "before", the replies now
are "after" (docs/upgrades.md).

The sample is the newest `limit` successful inference records that can be re-sent (`full`
mode, whole bodies: `replay.sending.skip_reason`), of one recorded version (the newest one
by default), re-sent oldest first. Each reply is grouped under its record's model and ctx
class, so both sides of a row are the same requests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

import aiohttp
import orjson
from yarl import URL

from ollama_tap import ollama
from ollama_tap.recorder.store import Filters, Store
from ollama_tap.replay.sending import Plan, send_all, skip_reason
from ollama_tap.upgrade.compare import compare
from ollama_tap.upgrade.samples import Side, compared, key_of

PAGE: Final = 200
VERSION_TIMEOUT: Final = aiohttp.ClientTimeout(total=10, sock_connect=5)


def sample(
    store: Store, filters: Filters, version: str | None, limit: int
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The newest `limit` re-sendable records of `version` (any when None), oldest first, and
    how many newer ones were passed over, by reason."""
    kept: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    cursor: str | None = None
    while len(kept) < limit:
        page, cursor = store.page(filters, PAGE, cursor)
        for summary in page:
            if (
                summary["endpoint"] not in ollama.INFERENCE_ENDPOINTS
                or summary["outcome"] != "ok"
                or (version is not None and summary["ollama_version"] != version)
            ):
                continue
            record = store.get(summary["id"])
            reason = "deleted meanwhile" if record is None else skip_reason(record, False)
            if reason is not None:
                skipped[reason] += 1
            elif record is not None and len(kept) < limit:
                kept.append(record)
        if cursor is None:
            break
    kept.reverse()
    return kept, skipped


async def version_at(to: URL) -> str | None:
    """What the upstream's /api/version says, None when it does not answer as Ollama does."""
    try:
        async with (
            aiohttp.ClientSession(timeout=VERSION_TIMEOUT) as session,
            session.get(to.with_path(to.path.rstrip("/") + "/api/version")) as resp,
        ):
            data = orjson.loads(await resp.read()) if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) and version else None


async def against(
    to: URL,
    records: list[dict[str, Any]],
    version: str | None,
    settings: tuple[float, int, int],
    tick: Callable[[], None],
) -> dict[str, Any]:
    """Re-send the records to `to` and compare; `settings` is (threshold, min_samples,
    concurrency). The document is compare's, with an `against` part."""
    threshold, min_samples, concurrency = settings
    remote = await version_at(to)
    pairs = await send_all(Plan(to, max(1, concurrency)), records, tick)
    now = time.time()
    before, after = Side(version or "recorded"), Side(remote or str(to))
    errors: Counter[str] = Counter()
    for record, pair in zip(records, pairs, strict=True):
        key = key_of(record)
        before.add(key, record["started"], compared(pair["recorded"]))
        if pair["now"]["outcome"] == "ok":
            after.add(key, now, compared(pair["now"]))
        else:
            errors[pair["now"]["error"] or pair["now"]["outcome"]] += 1
    doc = compare(before, after, threshold, min_samples, ("recorded", f"re-sent to {to}"))
    doc["against"] = {
        "url": str(to),
        "answered_version": remote,
        "sent": len(pairs),
        "failed": sum(errors.values()),
        "errors": [{"error": e, "count": n} for e, n in errors.most_common(5)],
    }
    return doc

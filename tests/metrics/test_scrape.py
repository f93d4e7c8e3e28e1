"""A scrape carries no `_created` series, and the README's `grep` examples print a handful of
lines, not a screenful, after a day's mix of traffic (tests/support/scrape.py)."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client import Counter, generate_latest

from tests.conftest import Proxy
from tests.support.scrape import drive, grepped, readme_greps

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


async def scrape(proxy: Proxy, accept: str | None = None) -> str:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{proxy.url}/metrics", headers=headers) as resp:
            assert resp.status == 200
            return await resp.text()


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
async def test_no_created_series(proxy: Proxy, accept: str | None) -> None:
    await drive(proxy.url, 16)
    text = await scrape(proxy, accept)
    assert "ollama_tap_requests_total" in text and "_bucket{" in text
    assert [line for line in text.splitlines() if "_created" in line] == []


def test_the_switch_holds_for_every_registry_in_the_process() -> None:
    """prometheus-client's own families made anywhere in the process (a test's registry
    included) follow ollama_tap.metrics' switch, so tests see what the app serves."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    Counter("x_things", "Things.", ["kind"], registry=registry).labels("a").inc()
    assert b"x_things_total" in generate_latest(registry)
    assert b"_created" not in generate_latest(registry)


async def test_the_readme_greps_print_a_handful_of_lines(proxy: Proxy) -> None:
    await drive(proxy.url, 16)
    text = await scrape(proxy)
    patterns = readme_greps()
    assert patterns, "the README has no `curl …/metrics | grep` example"
    for pattern in patterns:
        printed = grepped(pattern, text)
        assert 1 <= len(printed) <= 12, (pattern.pattern, printed)

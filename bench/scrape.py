"""What one scrape of /metrics weighs after N exchanges: bytes, lines, `_created` lines,
and the lines each of the README's `grep` examples prints.

The proxy runs in-process (make_app, as `serve` builds it) in front of the test suite's fake
Ollama; the exchanges cycle through native generate and chat, OpenAI chat and embeddings,
two chat models and an embedding model, three apps named by `X-Ollama-Tap-Client`
(tests/support/scrape.py), so every family a real scrape carries is fed. Series grow with
the label sets, not with the count: 16 and 1,000 differ by the buckets filled in between.

    .venv/bin/python -m bench.scrape                  # from the repository root; 16 and 1000
    .venv/bin/python -m bench.scrape --exchanges 16 --exchanges 100000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from ollama_tap.app import make_app
from ollama_tap.config import Settings
from ollama_tap.relay import make_site
from tests.support.fake_ollama import FakeOllama
from tests.support.scrape import drive, grepped, readme_greps


@dataclass(frozen=True)
class Weight:
    exchanges: int
    bytes: int
    lines: int
    created: int
    greps: dict[str, int]


async def scrape_after(exchanges: int) -> str:
    """The text of /metrics after `exchanges` exchanges through a fresh proxy."""
    fake = FakeOllama()
    upstream = web.AppRunner(fake.app(), access_log=None)
    await upstream.setup()
    await web.TCPSite(upstream, "127.0.0.1", 0).start()
    fake.url = f"http://127.0.0.1:{upstream.addresses[0][1]}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "records.db"
            values = {"upstream": fake.url, "db": db, "admin_token": "bench-scrape-admin-token"}
            settings = Settings(**values)  # type: ignore[arg-type]
            runner = web.AppRunner(make_app(settings, registry=CollectorRegistry()))
            await runner.setup()
            await make_site(runner, "127.0.0.1", 0).start()
            proxy = f"http://127.0.0.1:{runner.addresses[0][1]}"
            try:
                await drive(proxy, exchanges)
                async with aiohttp.ClientSession() as session:
                    async with session.get(proxy + "/metrics") as resp:
                        return await resp.text()
            finally:
                await runner.cleanup()
    finally:
        await upstream.cleanup()


def weigh(exchanges: int, text: str) -> Weight:
    lines = text.splitlines()
    return Weight(
        exchanges=exchanges,
        bytes=len(text.encode()),
        lines=len(lines),
        created=sum("_created" in line for line in lines),
        greps={p.pattern: len(grepped(p, text)) for p in readme_greps()},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--exchanges", type=int, action="append", help="default: 16 and 1000")
    args = parser.parse_args()
    # The exchange log lines are not what is measured.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    for n in args.exchanges or [16, 1000]:
        w = weigh(n, asyncio.run(scrape_after(n)))
        print(
            f"{w.exchanges:>7,} exchanges: {w.bytes:>9,} bytes  {w.lines:>6,} lines  "
            f"{w.created:>4} _created lines"
        )
        for pattern, count in w.greps.items():
            print(f"         README grep {pattern}: {count} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

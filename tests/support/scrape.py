"""A day's mix of traffic for weighing a scrape (tests/metrics/test_scrape.py, bench/scrape.py),
and the README's `curl …/metrics | grep` examples."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Final

import aiohttp

CLIENTS: Final = ("code-helper", "notes", "chat-ui")
CHAT_MODELS: Final = ("llama3.2:latest", "qwen3:8b")
README: Final = Path(__file__).resolve().parents[2] / "README.md"
_GREP: Final = re.compile(r"curl -s \S+/metrics \| grep (-E )?'?([^'\s]+)'?")


def request(i: int) -> tuple[str, dict[str, object]]:
    """The i-th exchange: native generate and chat, OpenAI chat, an embedding, in turn; two
    chat models."""
    model = CHAT_MODELS[i % 2]
    message = [{"role": "user", "content": f"Question {i}: why is the sky blue?"}]
    shape = i % 4
    if shape == 0:
        return "/api/generate", {"model": model, "prompt": f"Question {i}", "stream": True}
    if shape == 1:
        return "/api/chat", {"model": model, "messages": message, "stream": True}
    if shape == 2:
        return "/v1/chat/completions", {"model": model, "messages": message, "stream": True}
    return "/api/embed", {"model": "all-minilm:latest", "input": f"text {i}"}


async def drive(proxy: str, exchanges: int) -> None:
    """Send `exchanges` requests through `proxy`, eight at a time, three apps naming
    themselves by X-Ollama-Tap-Client."""
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> None:
            path, body = request(i)
            headers = {"X-Ollama-Tap-Client": CLIENTS[i % len(CLIENTS)]}
            async with session.post(proxy + path, json=body, headers=headers) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise RuntimeError(f"{path}: {resp.status} {text}")

        for start in range(0, exchanges, 8):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 8, exchanges))))


def readme_greps() -> list[re.Pattern[str]]:
    """The README's `curl -s …/metrics | grep [-E] PATTERN` examples, as the patterns grep
    would match (extended with -E; a basic pattern here has no special characters)."""
    return [
        re.compile(pattern if extended else re.escape(pattern))
        for extended, pattern in _GREP.findall(README.read_text())
    ]


def grepped(pattern: re.Pattern[str], text: str) -> list[str]:
    return [line for line in text.splitlines() if pattern.search(line)]

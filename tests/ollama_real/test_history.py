"""Whole chat messages dropped by a real Ollama's stage 1 (`server/prompt.go` `chatPrompt`),
and T5's verdicts on them (ollama_tap/truncation/history.py).

The truth comes from Ollama itself: `_debug_render_only` returns the prompt after stage 1,
and every message carries a tag `[mN]`, so a tag missing from the render is a dropped
message (as bench/dropped_history.py measures it)."""

from __future__ import annotations

from typing import Any, Final

import orjson

from tests.conftest import Proxy
from tests.ollama_real.conftest import MODEL, Ollama, call
from tests.support.metrics import settled
from tests.support.records import records

C: Final = 512
WORDS: Final = ["river", "stone", "cloud", "lamp", "garden", "engine", "silver", "quiet"]


def text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i * 3) % len(WORDS)] for i in range(n))


def conversation(first: int, turns: int) -> list[list[dict[str, str]]]:
    """A chat with a long first question, then short turns, each message tagged."""
    messages = [{"role": "system", "content": "You answer briefly."}]
    out = []
    for i in range(turns):
        size = first if i == 0 else 30
        messages = [*messages, {"role": "user", "content": f"[m{2 * i}] {text(size, i)}"}]
        out.append(messages)
        reply = {"role": "assistant", "content": f"[m{2 * i + 1}] {text(20, i + 1)}"}
        messages = [*messages, reply]
    return out


async def dropped(server: Ollama, body: dict[str, Any]) -> int:
    """How many of the request's tagged messages Ollama's render left out."""
    reply = await call(server.url, "POST", "/api/chat", {**body, "_debug_render_only": True})
    rendered = orjson.loads(reply.body)["_debug_info"]["rendered_template"]
    tagged = sum(1 for m in body["messages"] if m["role"] != "system")
    return tagged - sum(1 for n in range(tagged) if f"[m{n}]" in rendered)


async def test_a_chat_that_outgrows_c_is_told_when_its_old_messages_go(
    tapped: Proxy, real_ollama: Ollama
) -> None:
    """The first request that no longer fits loses the long first question, and its prompt
    shrinks: T5 tells it. Every request before it kept everything: no verdict there."""
    truth = []
    for messages in conversation(300, 8):
        body = {"model": MODEL, "messages": messages, "stream": False,
                "options": {"num_ctx": C, "num_predict": 1, "temperature": 0}}  # fmt: skip
        reply = await call(tapped.url, "POST", "/api/chat", body)
        assert reply.status == 200, reply.body
        truth.append(await dropped(real_ollama, body))
    await settled(tapped)
    found = sorted(await records(tapped, 8, limit="100"), key=lambda r: r["started"])
    told = [(r["truncation"] or {}).get("kind") for r in found]
    first = next(i for i, n in enumerate(truth) if n)
    assert truth[:first] == [0] * first and first < len(truth), truth
    assert told[:first] == [None] * first, (truth, told)
    assert told[first] == "history_dropped", (truth, told, [r.get("prompt_tokens") for r in found])
    assert all(n for n, kind in zip(truth, told, strict=True) if kind), (truth, told)

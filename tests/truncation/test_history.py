"""T5, whole old messages dropped from a chat (ollama_tap/truncation/history.py): through the
proxy against the fake's stage 1, and the rule's edges on hand-built exchanges."""

from __future__ import annotations

from typing import Any

import ollama
import orjson
import pytest

from ollama_tap.exchange import Outcome, RequestFields, Usage
from ollama_tap.truncation.context import Runtime
from ollama_tap.truncation.history import Conversations
from tests.conftest import Proxy
from tests.support.exchanges import new_exchange
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_ollama.context import stage_one
from tests.support.metrics import LLAMA, counter, settled
from tests.support.records import records

NOW = (0, 33, 0)


@pytest.fixture
def fake(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.context_rules = True
    return fake_ollama


def words(n: int) -> str:
    """`n` of the fake's tokens."""
    return " ".join(["w"] * n)


def turns(
    count: int, user: int, reply: int, first: int | None = None
) -> list[list[dict[str, str]]]:
    """The requests of one chat that appends a reply and a new question each turn (the
    first question `first` tokens long, when given)."""
    messages = [{"role": "system", "content": words(50)}]
    out = []
    for i in range(count):
        size = first if first is not None and i == 0 else user
        messages = [*messages, {"role": "user", "content": words(size)}]
        out.append(messages)
        messages = [*messages, {"role": "assistant", "content": words(reply)}]
    return out


async def test_a_chat_that_outgrows_c_is_told_its_old_messages_went(
    proxy: Proxy, fake: FakeOllama
) -> None:
    """A long first question, then short turns: the fifth request no longer fits 2048, and
    stage 1 drops the first question (its prompt shrinks). From then on every request
    loses it, but each grows by its turn as before: T5 tells the first, and misses the
    rest (docs/diagnoses.md: a drop that removes less than the turn adds)."""
    client = ollama.AsyncClient(host=proxy.url)
    dropped = []
    for messages in turns(7, 100, 100, first=1200):
        await client.chat(LLAMA, messages=messages, options={"num_ctx": 2048})
        dropped.append(stage_one({"messages": messages}, 2048)[1] > 0)
    assert dropped == [False, False, False, False, True, True, True]
    await settled(proxy)
    found = sorted(await records(proxy, 7), key=lambda r: r["started"])
    told = [(r["truncation"] or {}).get("rule") for r in found]
    assert told == [None, None, None, None, "T5", None, None]
    verdict = found[4]["truncation"]
    assert (verdict["kind"], verdict["context"], verdict["tokens_lost"]) == (
        "history_dropped", 2048, None,
    )  # fmt: skip
    assert "whole earlier messages were dropped" in verdict["explanation"]
    assert counter(proxy, "truncations_total", endpoint="/api/chat", model=LLAMA,
                   kind="history_dropped") == 1  # fmt: skip


async def test_ordinary_and_edited_chats_get_no_verdict(proxy: Proxy, fake: FakeOllama) -> None:
    """Chats that fit, one whose client compacts its history into a summary, and one that
    regenerates and edits its last question: nothing dropped, nothing told."""
    client = ollama.AsyncClient(host=proxy.url)
    sent = 0
    for messages in turns(6, 150, 100):
        await client.chat(LLAMA, messages=messages, options={"num_ctx": 4096})
        await client.chat(LLAMA, messages=messages, options={"num_ctx": 4096})  # regenerated
        edited = [*messages[:-1], {"role": "user", "content": words(3)}]
        await client.chat(LLAMA, messages=edited, options={"num_ctx": 4096})
        sent += 3
    summary = [{"role": "system", "content": words(50)}, {"role": "user", "content": words(5)}]
    await client.chat(LLAMA, messages=summary, options={"num_ctx": 4096})
    await settled(proxy)
    assert len(await records(proxy, sent + 1, limit="100")) == sent + 1
    assert proxy.sample("ollama_tap_truncations_total") is None


def chat(messages: list[Any], p: int, **body: Any) -> Any:
    ex = new_exchange("/api/chat", status=200, outcome=Outcome.OK, done_reason="stop")
    ex.usage = Usage(prompt_eval_count=p, eval_count=5)
    ex.request = RequestFields(model=LLAMA, parsed=True)
    ex.request_body = orjson.dumps({"model": LLAMA, "messages": messages, **body})
    return ex


def told(memory: Conversations, first: int, then: int, rt: Runtime | None = None,
         before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
         added: str = "a long new question " * 20) -> str | None:  # fmt: skip
    """The rule on a conversation's second request, its first having had `first` tokens."""
    rt = rt or Runtime(4096, NOW)
    one = [{"role": "user", "content": "hello"}]
    two = [*one, {"role": "assistant", "content": "hi"}, {"role": "user", "content": added}]
    memory.judge(chat(one, first, **(before or {})), rt, first)
    verdict = memory.judge(chat(two, then, **(after or {})), rt, then)
    return verdict.rule if verdict else None


def test_the_prompt_must_grow_with_what_was_added() -> None:
    # 402 characters added: at least 402 / 16 ≈ 25 tokens more.
    assert told(Conversations(), 1000, 1030) is None
    assert told(Conversations(), 1000, 1020) == "T5"
    assert told(Conversations(), 1000, 900) == "T5"


def test_what_changes_the_render_is_another_conversation() -> None:
    for field, value in [("tools", [{"type": "function"}]), ("think", True), ("format", "json")]:
        assert told(Conversations(), 1000, 900, after={field: value}) is None
        assert told(Conversations(), 1000, 900, before={field: value}, after={field: value})


def test_think_blocks_added_are_not_counted() -> None:
    thought = "<think>" + "reasoning " * 200 + "</think>short"
    assert told(Conversations(), 1000, 1002, added=thought) is None
    assert told(Conversations(), 1000, 1001, added="<think>never closed " * 50) is None


def test_not_judged_where_stage_one_does_not_act_or_p_leaves_out_the_cache() -> None:
    assert told(Conversations(), 1000, 900, after={"truncate": False}) is None
    assert told(Conversations(), 1000, 900, rt=Runtime(4096, NOW, soft=True)) is None
    assert told(Conversations(), 1000, 900, rt=Runtime(4096, (0, 30, 0))) is None
    assert told(Conversations(), 1000, 900, rt=Runtime(None, (0, 24, 0))) == "T5"


def test_the_memory_is_bounded_and_forgets_the_oldest() -> None:
    memory = Conversations(size=3)
    for i in range(10):
        memory.judge(chat([{"role": "user", "content": f"chat {i}"}], 100), Runtime(None, NOW), 100)
    assert len(memory) == 3
    # A malformed body is forwarded and judged by nothing here.
    bad = chat([], 5)
    bad.request_body = b"{not json"
    assert memory.judge(bad, Runtime(None, NOW), 5) is None
    assert memory.judge(chat(["not a message"], 5), Runtime(None, NOW), 5) is None

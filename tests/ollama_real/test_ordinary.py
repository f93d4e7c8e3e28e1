"""100 varied ordinary requests per release against the real Ollama: not one truncation
verdict, and not one load the scheduler did not make.

Ordinary: every prompt and its reply fit the context the runner really has. The requests mix
`/api/generate`, `/api/chat` (single messages and conversations that grow by the reply they
got, the case the dropped-history rule T5 watches), `/v1/chat/completions` with `options`
Ollama ignores, `/v1/completions`, Modelfile-free `num_keep`, and three contexts (the default,
512 and 256), grouped so that the runner reloads once per context: the loads the proxy reports
are exactly those. On v0.30.0 ten embeddings of the pooled Gemma end the run (v0.24.0 gives
this Gemma no embeddings: test_truncation.py says why), one more load.
"""

from __future__ import annotations

import random
from typing import Any, Final

import pytest

from ollama_tap.app import LOADS
from tests.conftest import MakeProxy, Proxy
from tests.ollama_real.conftest import BOTH_RELEASES, MODEL, Ollama, call
from tests.ollama_real.provision import CURRENT
from tests.support.metrics import settled
from tests.support.records import records
from tests.support.waiting import eventually

WORDS: Final = ["river", "stone", "cloud", "lamp", "garden", "engine", "silver", "quiet", "sky"]
GROUPS: Final = ((None, 40), (512, 30), (256, 30))
"""(num_ctx, requests): the default context first, where the /v1 requests go too (they carry
no num_ctx Ollama reads, so elsewhere each would reload the runner twice)."""
EMBEDDINGS: Final = 10


def text(rng: random.Random, most: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(1, most)))


class Requests:
    """The run's request bodies, drawn from one seed; conversations grow by their replies."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)
        self.conversations: list[list[dict[str, str]]] = []

    def next(self, num_ctx: int | None) -> tuple[str, dict[str, Any], list[dict[str, str]] | None]:
        rng = self.rng
        options: dict[str, Any] = {"num_predict": rng.randint(1, 3), "temperature": 0}
        if num_ctx:
            options["num_ctx"] = num_ctx
        if num_ctx == 512 and rng.random() < 0.5:
            options["num_keep"] = rng.choice([0, 8, 64])
        kinds = ["generate", "chat", "conversation", "conversation"]
        if num_ctx is None:
            kinds += ["v1", "v1-text"]
        kind = rng.choice(kinds)
        stream = rng.random() < 0.5
        if kind == "generate":
            body = {"model": MODEL, "prompt": text(rng, 40), "stream": stream, "options": options}
            return "/api/generate", body, None
        if kind == "v1":
            body = {"model": MODEL, "max_tokens": 2, "temperature": 0, "stream": stream,
                    "messages": [{"role": "user", "content": text(rng, 40)}],
                    "options": {"num_ctx": 64}}  # fmt: skip
            return "/v1/chat/completions", body, None
        if kind == "v1-text":
            body = {"model": MODEL, "prompt": text(rng, 40), "max_tokens": 2}
            return "/v1/completions", body, None
        messages: list[dict[str, str]] = [{"role": "user", "content": text(rng, 30)}]
        if kind == "conversation":
            # At most five turns of a few words: far inside even the 256-token context.
            open_ = [c for c in self.conversations if len(c) < 9]
            if open_ and rng.random() < 0.75:
                conversation = rng.choice(open_)
                conversation.append({"role": "user", "content": text(rng, 8)})
            else:
                conversation = [{"role": "user", "content": text(rng, 8)}]
                if rng.random() < 0.3:
                    conversation.insert(0, {"role": "system", "content": text(rng, 6)})
                self.conversations.append(conversation)
            messages = conversation
        body = {"model": MODEL, "messages": list(messages), "stream": stream, "options": options}
        return "/api/chat", body, messages if kind == "conversation" else None


def answer(endpoint: str, body: dict[str, Any], reply: Any) -> str:
    """The assistant's text of a chat reply, streamed or not."""
    if endpoint != "/api/chat":
        return ""
    if body["stream"]:
        return "".join(line["message"]["content"] for line in reply.lines())
    content: str = reply.json()["message"]["content"]
    return content


@pytest.fixture
async def quiet(proxy_factory: MakeProxy, real_ollama: Ollama) -> Proxy:
    """A proxy started with nothing resident, once it has read /api/ps: every load after is
    one the run made."""
    await real_ollama.unload_all()
    proxy = await proxy_factory(upstream=real_ollama.url)
    await eventually(lambda: proxy.app[LOADS].baselined, within=60)
    return proxy


@BOTH_RELEASES
async def test_ordinary_requests_get_no_verdict_and_no_phantom_load(
    quiet: Proxy, real_ollama: Ollama, request: pytest.FixtureRequest
) -> None:
    requests = Requests(f"ordinary-{real_ollama.version}")
    sent = 0
    for num_ctx, count in GROUPS:
        requests.conversations = []
        for _ in range(count):
            endpoint, body, conversation = requests.next(num_ctx)
            reply = await call(quiet.url, "POST", endpoint, body)
            assert reply.status == 200, (endpoint, body, reply.body)
            if conversation is not None:
                conversation.append({"role": "assistant", "content": answer(endpoint, body, reply)})
            sent += 1
    embedded = 0
    if real_ollama.version == CURRENT:
        embedder = request.getfixturevalue("embedder")
        rng = random.Random("embeddings")
        for i in range(EMBEDDINGS):
            # One context for both routes (/v1 carries none): one load of the embedder.
            if i % 2:
                inputs = [text(rng, 30), "sky"]
                endpoint, body = "/v1/embeddings", {"model": embedder, "input": inputs}
            else:
                endpoint, body = "/api/embed", {"model": embedder, "input": text(rng, 30)}
            reply = await call(quiet.url, "POST", endpoint, body)
            assert reply.status == 200, (endpoint, body, reply.body)
        embedded = EMBEDDINGS
    await settled(quiet)
    written = await records(quiet, sent + embedded, limit=str(sent + embedded))
    assert [r for r in written if r["truncation"] is not None] == []
    assert quiet.sample("ollama_tap_truncations_total") is None
    # One load per context, in order; the embedder's (v0.30.0) evicts nothing it reports
    # wrongly: its own first load and no other.
    events = list(reversed(quiet.app[LOADS].recent()))
    causes = [(e["model"], e["cause"]) for e in events]
    expected = [(MODEL, "first_load"), (MODEL, "options_changed"), (MODEL, "options_changed")]
    if embedded:
        expected.append((embedder, "first_load"))
    assert causes == expected, events

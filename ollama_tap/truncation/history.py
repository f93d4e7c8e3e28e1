"""T5: whole old messages dropped from a chat (Ollama's stage 1), told from a conversation
that grew while its prompt barely did.

Before it cuts tokens, Ollama drops whole non-system messages from the front of a chat that
does not fit C (`server/prompt.go` `chatPrompt`) and answers 200 with the count of what it
kept: nothing on the wire says a message went. What the proxy can see is a conversation's
next request: its messages are the previous request's plus the reply and a new turn, so its
prompt should grow by at least what was added. When it grows by less than the added
characters / 16 (a token is 3–5 characters of text; 16 leaves room for code, CJK text and
templates that render little around a message), older messages went. Measured on the real
Ollama (`bench/dropped_history.py`, docs/diagnoses.md): no false verdict in 200 ordinary
chats (909 requests), 82 of 141 requests with drops caught; a drop that removes less than
the turn adds is missed.

What would shrink a prompt with nothing dropped is kept out: the conversation is keyed by
the model's digest and the body's `tools`, `think` and `format` (each changes the render);
`<think>` blocks in the added messages are not counted (templates strip old ones); a client
that edits or compacts its history no longer extends a remembered prefix. Not judged where
stage 1 does not act (`truncate: false`, MLX models) or where `P` leaves out the prompt's
cached front (v0.30.0).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from hashlib import blake2b
from typing import Any, Final

import orjson

from ollama_tap.exchange import Exchange
from ollama_tap.facts import TruncationKind, Verdict
from ollama_tap.ollama.version import CACHED_COUNTED, LLAMA_SERVER
from ollama_tap.truncation.context import Runtime

KEPT: Final = 4096
"""Conversations remembered (each a 16-byte digest and a count: about 0.5 MB in all)."""
CHARS_PER_TOKEN: Final = 16
"""The most characters of added text a token may stand for before the growth is too small."""
RENDER_KEYS: Final = ("tools", "think", "format")
"""Body fields besides the messages that change how Ollama renders a chat."""
_THINK: Final = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


class Conversations:
    """The prompt length of recent `/api/chat` requests by a digest of what they rendered
    from (the model, RENDER_KEYS and the messages), the least recently used forgotten first."""

    def __init__(self, size: int = KEPT) -> None:
        self.size = size
        self._prompts: OrderedDict[bytes, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._prompts)

    def judge(self, ex: Exchange, rt: Runtime, p: int) -> Verdict | None:
        """T5 on a finished `/api/chat` exchange whose prompt was `p` tokens, and remember it
        for the conversation's next request."""
        if rt.soft or (rt.version is not None and LLAMA_SERVER <= rt.version < CACHED_COUNTED):
            return None
        body = _body(ex.request_body)
        messages = body.get("messages") if body is not None else None
        if body is None or body.get("truncate") is False or not isinstance(messages, list):
            return None
        prefixes = _prefixes(_key(ex, body), messages)
        if not prefixes:
            return None
        verdict = None
        for k in range(len(prefixes) - 1, 0, -1):
            before = self._prompts.get(prefixes[k - 1])
            if before is not None:
                verdict = _judge(messages[k:], before, p, rt.context)
                break
        self._remember(prefixes[-1], p)
        return verdict

    def _remember(self, digest: bytes, p: int) -> None:
        self._prompts[digest] = p
        self._prompts.move_to_end(digest)
        while len(self._prompts) > self.size:
            self._prompts.popitem(last=False)


def _body(raw: bytes | None) -> dict[str, Any] | None:
    try:
        body = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def _key(ex: Exchange, body: dict[str, Any]) -> bytes:
    model = ex.standing.digest if ex.standing is not None and ex.standing.digest else ex.model
    shaped = {k: body.get(k) for k in RENDER_KEYS}
    return orjson.dumps([model, shaped], option=orjson.OPT_SORT_KEYS)


def _prefixes(key: bytes, messages: list[Any]) -> list[bytes]:
    """The digest of each prefix of the messages (the first one, two, …, all), under `key`."""
    h = blake2b(key, digest_size=16)
    out = []
    for message in messages:
        if not isinstance(message, dict):
            return []
        part = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
        out.append(h.copy().digest())
    return out


def _judge(added: list[Any], before: int, p: int, c: int | None) -> Verdict | None:
    chars = sum(_chars(m) for m in added)
    if p - before >= chars / CHARS_PER_TOKEN:
        return None
    return Verdict(
        TruncationKind.HISTORY_DROPPED, "T5", c, None, p,
        f"whole earlier messages were dropped to fit the context: the conversation grew by "
        f"{len(added)} message{'s' if len(added) != 1 else ''} ({chars:,} characters) since "
        f"its previous request, but its prompt went from {before:,} to only {p:,} tokens "
        "(Ollama drops the oldest non-system messages first); raise num_ctx "
        "(`ollama-tap context` shows what would hold it) or shorten the history",
    )  # fmt: skip


def _chars(message: dict[str, Any]) -> int:
    """The characters of an added message that Ollama surely renders: its text without
    `<think>` blocks; none of a system message (a template may keep only the first)."""
    content = message.get("content")
    if message.get("role") == "system" or not isinstance(content, str):
        return 0
    return len(_THINK.sub("", content))

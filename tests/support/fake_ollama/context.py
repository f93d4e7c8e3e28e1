"""Ollama's context rules for the fake (opt-in: `Engine.context_rules = True`): prompt
token counts, stage-2 truncation, the overflow refusals, context shift, and cloud names.

Each rule cites the part of the research (/work/shared/research/ollama-truncation-and-loads.md,
"§n") and of Ollama's source at fb30760 it follows. Tokens are the fake's word pieces
(`\\w+` or one punctuation mark), and the fake's tokenizers add no BOS (as gpt-oss).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from tests.support.fake_ollama.models import FakeModel, model_details
from tests.support.fake_ollama.replies import Refused

MESSAGE_OVERHEAD: Final = 4
"""Template tokens around each chat message (role header and end marker)."""
DEFAULT_NUM_KEEP: Final = 4
"""api/types.go `NumKeep: 4`."""
NO_SHIFT_FAMILIES: Final = frozenset({"deepseek2"})
"""`supportsContextShift` (sched.go:129-147): every family but deepseek2 shifts by default."""
_PIECE = re.compile(r"\w+|[^\w\s]")


def count(text: str) -> int:
    return len(_PIECE.findall(text))


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list (OpenAI, Anthropic)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def prompt_tokens(body: dict[str, Any], *, chat: bool) -> int:
    """The rendered prompt's length: each message's text plus its template tokens (chat),
    or the system and prompt (generate); an Anthropic top-level `system` counts too."""
    if not chat:
        return count(_text(body.get("system"))) + count(_text(body.get("prompt")))
    given = body.get("messages")
    messages: list[Any] = given if isinstance(given, list) else []
    system = count(_text(body.get("system"))) + MESSAGE_OVERHEAD if body.get("system") else 0
    return system + sum(
        count(_text(m.get("content"))) + MESSAGE_OVERHEAD for m in messages if isinstance(m, dict)
    )


def shift_limit(c: int, keep: int) -> int:
    """L(C,k) = C − max(floor((C−k)/2), 1) (§3, `contextShiftPromptLimit`, v0.30.11+)."""
    keep = max(0, min(keep, c - 1))
    return c - max((c - keep) // 2, 1)


def train_context(model: FakeModel) -> int:
    architecture = model.model_info.get("general.architecture", "")
    return int(model.model_info.get(f"{architecture}.context_length", model.context_length))


def runtime_context(model: FakeModel, num_ctx: int | None) -> int:
    """C: the request's num_ctx (else the model's default) capped at the training context
    (llm/server.go:111-116, "requested context size too large for model")."""
    return min(num_ctx or model.context_length, train_context(model))


def context_size_error(n: int, c: int) -> str:
    """llama-server's refusal, passed through by Ollama as the raw body in a string (§4,
    `statusErrorMessage`; llama.cpp `update_slots`, `exceed_context_size_error`)."""
    inner = (
        '{"error":{"code":400,"message":"request (%d tokens) exceeds the available context '
        'size (%d tokens), try increasing it","type":"exceed_context_size_error",'
        '"n_prompt_tokens":%d,"n_ctx":%d}}'
    )
    return inner % (n, c, n, c)


NO_SHIFT_ERROR: Final = (
    "the prompt is longer than the context length currently available to the model; shorten "
    "the prompt, adjust the context length in settings, or use a model with a longer context "
    "length"
)
"""llama_server.go:295-300: truncate on, shift off, prompt > C−1 tokens."""
EMBED_ERROR: Final = "the input length exceeds the context length"
"""routes.go:936-941: /api/embed with truncate:false and an input over the context."""


@dataclass
class Plan:
    """What Ollama makes of one request's prompt under its context rules."""

    context: int
    """C, the runner's per-slot context."""
    full: int
    """The untruncated prompt's tokens (the final `context` is built from these)."""
    kept: int
    """prompt_eval_count: the tokens llama-server evaluated."""
    shift: bool
    refusal: tuple[int, str] | None = None

    def output(self, wanted: int) -> tuple[int, bool]:
        """(eval_count, cut by the context): with shift on, generation runs past C (§5,
        llama.cpp `pre_decode` shifts); with shift off it stops when the prompt and output
        reach C − 1 (`process_token`, STOP_TYPE_LIMIT → done_reason "length")."""
        room = self.context - 1 - self.kept
        if self.shift or wanted <= room:
            return wanted, False
        return max(room, 0), True


def plan(model: FakeModel, body: dict[str, Any], num_ctx: int | None, *, chat: bool) -> Plan:
    """Stage 2 of §3 (`completionPromptForRequest`) and the refusals of §4:

    - a prompt of at most C−1 tokens is kept whole;
    - `truncate:false`, or chat on a native-template model (no TEMPLATE: llama-server
      applies the chat template, no stage 2), answers 400 with llama-server's error;
    - shift off (`shift:false`, or a deepseek2 model) answers 400 with Ollama's sentence;
    - otherwise the first k = num_keep tokens and the tail are kept, L(C,k) in all.
    """
    c = runtime_context(model, num_ctx)
    n = prompt_tokens(body, chat=chat)
    shift_field = body.get("shift")
    shift = (
        shift_field
        if isinstance(shift_field, bool)
        else model.details.get("family") not in NO_SHIFT_FAMILIES
    )
    if n <= c - 1:
        return Plan(c, n, n, shift)
    if body.get("truncate") is False or (chat and not model.template):
        return Plan(c, n, n, shift, (400, context_size_error(n, c)))
    if not shift:
        return Plan(c, n, n, shift, (400, NO_SHIFT_ERROR))
    given = body.get("options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    keep = options.get("num_keep", DEFAULT_NUM_KEEP)
    kept = c - 1 if isinstance(keep, int) and keep < 0 else shift_limit(c, int(keep))
    return Plan(c, n, kept, shift)


def embed_counts(
    model: FakeModel, body: dict[str, Any], inputs: list[str], num_ctx: int | None
) -> list[int]:
    """§6: each input is cut to its first ctxLen = min(num_ctx, training context) tokens
    (the head kept); with `truncate:false` an input over it is refused (raised as 400)."""
    limit = runtime_context(model, num_ctx)
    counts = [count(text) + 2 for text in inputs]  # + the model's [CLS] and [SEP]
    if body.get("truncate") is False and any(n > limit for n in counts):
        raise Refused(400, EMBED_ERROR)
    return [min(n, limit) for n in counts]


def is_cloud(name: str) -> bool:
    """`modelref.parseSourceSuffix` (§9): the text after the last ":" is `cloud`, or holds
    no "/" and ends in `-cloud`; a name without a tag is local."""
    if ":" not in name:
        return False
    suffix = name.rpartition(":")[2].lower()
    return suffix == "cloud" or ("/" not in suffix and suffix.endswith("-cloud"))


def cloud_model(name: str) -> FakeModel:
    """A cloud model as the fake serves it: proxied (here: answered) without a local runner,
    so it never appears in /api/ps (§9, `cloudPassthroughMiddleware`)."""
    return FakeModel(
        name=name,
        digest=hashlib.sha256(name.encode()).hexdigest(),
        size=0,
        details=model_details("cloud", "", ""),
        model_info={},
        capabilities=["completion", "tools", "thinking"],
    )

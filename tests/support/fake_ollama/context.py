"""Ollama's context rules for the fake (opt-in: `Engine.context_rules = True`): prompt
token counts, stage-1 message dropping, stage-2 truncation, the overflow refusals, context
shift in llama-server's padded slot, MLX's soft context, the embedding batch, cloud names.

Each rule cites the part of the research (/work/shared/research/ollama-truncation-and-loads.md,
"§n"; ollama-fidelity.md, "F§n") and Ollama's source (fb30760, v0.33.0-rc2, unless a
version is named) it follows. Tokens are the fake's word pieces (`\\w+` or one punctuation
mark), and the fake's tokenizers add no BOS (as gpt-oss).
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
SLOT_PADDING: Final = 256
"""llama.cpp `src/llama-context.cpp`: `n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256)`; the
llama-server runners (v0.30.0+) run in that slot, the Go runners (v0.4–v0.24) in C."""
VISION_FLOOR: Final = 2048
"""`sched.go` `getRunner` raises a vision model's num_ctx to at least 2048 (F§1 #9)."""
EMBED_BATCH: Final = 2048
"""`llm/llama_server.go` `embeddingBatchSize` / `WithDefaultEmbeddingNumBatch` (v0.30.0+):
an embedding runner's batch is min(2048, num_ctx) unless the request sets num_batch."""
LLAMA_SERVER: Final = (0, 30, 0)
SHIFT_HEADROOM: Final = (0, 30, 11)
NO_SHIFT_REFUSAL: Final = (0, 30, 9)
"""Versions: llama-server runners; truncation to L(C,k) (`c191a145b`); Ollama's own
shift-off sentence and the shift default true (F§5)."""
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
    fallback = model.context_length or 1 << 20
    return int(model.model_info.get(f"{architecture}.context_length", fallback))


def default_context(version: tuple[int, int, int], vram_gib: float, env: int) -> int:
    """The server's num_ctx for a request and a model that set none (F§5 "Default
    context"): `OLLAMA_CONTEXT_LENGTH` when set above 0; else 2048 through v0.6.6, 4096
    from v0.6.7 (`44b466eeb`), and from v0.15.5 (`0334ffa62`, `0` meaning auto) by total
    VRAM: under 23 GiB 4096, under 47 GiB 32768, else 262144 (`envconfig/config.go`,
    `server/sched.go`). The gpt-oss/qwen3vl floor of 8192 (v0.11.x) is not simulated."""
    if env > 0:
        return env
    if version < (0, 6, 7):
        return 2048
    if version < (0, 15, 5) or vram_gib < 23:
        return 4096
    return 32768 if vram_gib < 47 else 262144


def runtime_context(model: FakeModel, num_ctx: int | None, default: int = 4096) -> int:
    """C: the request's num_ctx (else the model's automatic context: its Modelfile's, else
    the server's `default`), raised to 4, or 2048 for a vision model (`sched.go`
    `getRunner`), capped at the training context (llm/server.go:111-116, "requested
    context size too large for model")."""
    floor = VISION_FLOOR if "vision" in model.capabilities else 4
    automatic = model.context_length or default
    return min(max(num_ctx or automatic, floor), train_context(model))


def slot_context(model: FakeModel, c: int, version: tuple[int, int, int]) -> int:
    """llama-server's per-slot context: C padded up to a multiple of 256, capped at the
    training context (`server-context.cpp`); C on the Go runners (< v0.30.0)."""
    if version < LLAMA_SERVER:
        return c
    padded = -(-c // SLOT_PADDING) * SLOT_PADDING
    return min(padded, max(train_context(model), c))


def is_mlx(model: FakeModel) -> bool:
    """A safetensors model runs on the MLX runner (`x/mlxrunner`, v0.16.0+)."""
    return model.details.get("format") == "safetensors"


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.30.11-rc2` → (0, 30, 11); a source build's `0.0.0` runs the newest code."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    version = (int(found[1]), int(found[2]), int(found[3])) if found else (0, 0, 0)
    return (1 << 30, 0, 0) if version == (0, 0, 0) else version


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
"""routes.go:936-941: /api/embed with truncate:false and an input over the context; the
legacy /api/embeddings answers it with status 500 (routes.go:1084-1089)."""


def mlx_error(n: int, limit: int) -> str:
    """`x/mlxrunner/pipeline.go:60`: the MLX runner refuses a prompt over the model's max."""
    return f"input length ({n} tokens) exceeds the model's maximum context length ({limit} tokens)"


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
    slot: int = 0
    """llama-server's padded slot (`slot_context`); 0 means C."""
    dropped: int = 0
    """Whole messages stage 1 dropped from the front of the history."""

    def output(self, wanted: int) -> tuple[int, bool]:
        """(eval_count, cut by the context): with shift on, generation runs past the slot
        (§5, llama.cpp `pre_decode` shifts); with shift off it stops when the prompt and
        output fill the slot (`process_token`: `n_tokens + 1 >= n_ctx`, STOP_TYPE_LIMIT →
        done_reason "length"), the slot being C padded to 256 (F§1 #3)."""
        room = (self.slot or self.context) - self.kept
        if self.shift or wanted <= room:
            return wanted, False
        return max(room, 0), True


def plan(
    model: FakeModel,
    body: dict[str, Any],
    num_ctx: int | None,
    *,
    chat: bool,
    version: tuple[int, int, int] = (1 << 30, 0, 0),
    default: int = 4096,
) -> Plan:
    """Stage 1 and stage 2 of §3 and the refusals of §4, as `version` runs them:

    - chat drops whole old messages first (stage 1, below);
    - a prompt of at most C−1 tokens is kept whole;
    - `truncate:false`, or chat on a native-template model (no TEMPLATE: llama-server
      applies the chat template, no stage 2), goes to llama-server whole, which refuses
      it when it does not fit its padded slot;
    - shift off (`shift:false`, or a deepseek2 model) answers 400 with Ollama's sentence
      (v0.30.9+);
    - otherwise the first k = num_keep tokens and the tail are kept, L(C,k) in all
      (v0.30.11+), C − 1 (v0.30.0–v0.30.10) or C (the Go runners, v0.4–v0.24, which cut
      only a prompt over C).
    MLX models (safetensors) follow `mlx_plan`.
    """
    c = runtime_context(model, num_ctx, default)
    if is_mlx(model):
        return mlx_plan(model, body, c, chat=chat)
    slot = slot_context(model, c, version)
    n, dropped = stage_one(body, c) if chat and body.get("truncate") is not False else (0, 0)
    n = n or prompt_tokens(body, chat=chat)
    shift = shift_default(model, body, c, version)
    out = Plan(c, n, n, shift, slot=slot, dropped=dropped)
    if version < LLAMA_SERVER:
        out.kept = min(n, c)  # the Go runners kept the last C (`runner.go` loadCache)
        return out
    if n <= c - 1:
        return out
    if body.get("truncate") is False or (chat and not model.template):
        if n >= slot:
            out.refusal = (400, context_size_error(n, slot))
        return out
    if not shift and version >= NO_SHIFT_REFUSAL:
        out.refusal = (400, NO_SHIFT_ERROR)
        return out
    given = body.get("options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    keep = options.get("num_keep", modelfile_num_keep(model))
    if version < SHIFT_HEADROOM or (isinstance(keep, int) and keep < 0):
        out.kept = c - 1
    else:
        out.kept = shift_limit(c, int(keep))
    return out


def modelfile_num_keep(model: FakeModel) -> int:
    """The Modelfile's `PARAMETER num_keep` (shown in /api/show `parameters`), else 4: the
    model's options start from `api.DefaultOptions`, then the Modelfile, then the request."""
    for line in model.parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_keep":
            return int(value)
    return DEFAULT_NUM_KEEP


def shift_default(
    model: FakeModel, body: dict[str, Any], c: int, version: tuple[int, int, int]
) -> bool:
    """The request's `shift`, else the default: true except deepseek2 (v0.30.9+), C < 8192
    on v0.30.0–v0.30.8, always on the Go runners (F§5 "Shift history")."""
    if isinstance(body.get("shift"), bool):
        return bool(body["shift"])
    if version < LLAMA_SERVER:
        return True
    if version < NO_SHIFT_REFUSAL:
        return c < 8192
    return model.details.get("family") not in NO_SHIFT_FAMILIES


def stage_one(body: dict[str, Any], c: int) -> tuple[int, int]:
    """`server/prompt.go` `chatPrompt` (and `truncateNativeChatMessages` for native-template
    models), unchanged since before v0.4: from the second-to-last message back, keep the
    longest tail of the history whose rendering, with the system messages before it, is
    at most C tokens; the last message and every system message always stay. Returns the
    kept prompt's tokens and how many messages were dropped (0, 0 without messages)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if len(messages) < 2:
        return 0, 0
    top = count(_text(body.get("system"))) + MESSAGE_OVERHEAD if body.get("system") else 0
    sizes = [count(_text(m.get("content"))) + MESSAGE_OVERHEAD for m in messages]
    pairs = zip(messages, sizes, strict=True)
    system = [size if m.get("role") == "system" else 0 for m, size in pairs]

    def rendered(start: int) -> int:
        return top + sum(system[:start]) + sum(sizes[start:])

    start = len(messages) - 1
    for i in range(len(messages) - 2, -1, -1):
        if rendered(i) > c:
            break
        start = i
    total = rendered(start)
    dropped = sum(1 for size in system[:start] if not size)
    return total, dropped


def mlx_plan(model: FakeModel, body: dict[str, Any], c: int, *, chat: bool) -> Plan:
    """The MLX runner (F§1 #5): /api/ps shows the soft num_ctx C (`x/mlxrunner/client.go`
    `reportedContextLength`, v0.30.11+), but it enforces the model's maximum: no stage 1
    (`routes.go:2696`), no truncation, no shift; a prompt over the maximum is refused
    (`pipeline.go:59-60`) and the output is capped at the maximum less the prompt."""
    limit = train_context(model)
    n = prompt_tokens(body, chat=chat)
    out = Plan(c, n, n, False, slot=limit)
    if n > limit:
        out.refusal = (400, mlx_error(n, limit))
    return out


def embed_counts(
    model: FakeModel,
    body: dict[str, Any],
    inputs: list[str],
    num_ctx: int | None,
    default: int = 4096,
) -> list[int]:
    """§6: each input is cut to its first ctxLen = min(num_ctx, training context) tokens
    (the head kept); with `truncate:false` an input over it is refused (raised as 400).
    Then (v0.30.0+, F§1 #7) one over the embedding batch fails in llama-server and is
    retried cut to the batch (`routes.go` `truncateInputToLimit(text, opts.NumBatch)`)."""
    limit = runtime_context(model, num_ctx, default)
    counts = [count(text) + 2 for text in inputs]  # + the model's [CLS] and [SEP]
    if body.get("truncate") is False and any(n > limit for n in counts):
        raise Refused(400, EMBED_ERROR)
    given = body.get("options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    asked = options.get("num_batch")
    batch = asked if isinstance(asked, int) and asked > 0 else EMBED_BATCH
    batch = min(batch, num_ctx or model.context_length or default, limit)
    return [min(n, limit, batch) for n in counts]


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

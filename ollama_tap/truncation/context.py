"""What `C` is for one exchange: the context Ollama set, the slot llama-server made of it,
and when the proxy cannot know it. Pure functions; the table in docs/diagnoses.md cites the
Ollama source (and versions) each follows."""

from __future__ import annotations

from typing import Final

from ollama_tap.ollama.version import LLAMA_SERVER, Version

SLOT_PADDING: Final = 256
"""llama.cpp pads the context and the per-sequence context up to a multiple of 256
(`src/llama-context.cpp`: `cparams.n_ctx = GGML_PAD(n_ctx, 256)`, `n_ctx_seq =
GGML_PAD(n_ctx / n_seq_max, 256)`, llama.cpp PR 17046); Ollama and /api/ps keep the
unpadded `num_ctx`. Only llama-server runners pad (Ollama v0.30.0 on); the Go runners of
v0.4.0–v0.24.x sized their cache at exactly C."""
RELOAD_NS: Final = 20_000_000
"""A `load_duration` above this may include a (re)load, so the last /api/ps row may
describe the runner before it. Ollama's warm path (`scheduleRunner` finding a resident
runner, `sched.go` `useLoadedRunner`) takes microseconds; starting llama-server and
waiting for its health check cannot take under 20 ms. A busy queue can exceed it without
a load: that only makes C unknown, never wrong."""


class Runtime:
    """What the rules need beyond the exchange. Made once per exchange and never changed:
    a plain class, as its `__init__` compiles (a frozen dataclass's is generated at import
    and runs interpreted, some 7,500 instructions an exchange)."""

    __slots__ = ("context", "num_keep", "soft", "train", "version")

    def __init__(
        self,
        context: int | None,
        version: Version | None,
        train: int | None = None,
        soft: bool = False,
        num_keep: int | None = None,
    ) -> None:
        self.context = context
        """C: the runtime context the request ran with, None when unknown."""
        self.version = version
        """Ollama's version per /api/version; None (not read yet, or a `0.0.0` source build)
        is taken as current."""
        self.train = train
        """The model's training context (/api/show), which caps llama-server's padded slot."""
        self.soft = soft
        """C is an MLX runner's soft `num_ctx` (/api/ps `details.format` "safetensors",
        Ollama v0.30.11+, `x/mlxrunner/client.go` `reportedContextLength`): the runner
        enforces the model's maximum, never truncates and never shifts
        (`x/mlxrunner/pipeline.go`), so only the refusal rule applies."""
        self.num_keep = num_keep
        """The model's Modelfile `num_keep` (/api/show `parameters`), which a request's
        `options.num_keep` overrides (`api.Options` from the Modelfile, then the request)."""


def slot_context(c: int, train: int | None, version: Version | None) -> int:
    """The per-slot context llama-server really runs with: C padded up to a multiple of
    256, capped at the training context (`server-context.cpp` caps `n_ctx_slot` at
    `n_ctx_train`). C itself on the Go runners (< v0.30.0)."""
    if version is not None and version < LLAMA_SERVER:
        return c
    padded = -(-c // SLOT_PADDING) * SLOT_PADDING
    return min(padded, max(train, c)) if train else padded


def runtime_context(
    request_ctx: int | None, loaded_ctx: int | None, *, reloaded: bool
) -> int | None:
    """C for one exchange: the runner's context is the request's num_ctx capped at the
    model's training context, and /api/ps shows it. When the model may have been
    (re)loaded for this reply, the last /api/ps may describe the runner before: the
    request's num_ctx (an upper bound of C) wins, and with none set C is unknown (a client
    that leaves num_ctx unset after another set it gets Ollama's default, not the old
    row's value). A C too large only misses, never accuses."""
    if request_ctx is None:
        return None if reloaded else loaded_ctx
    if loaded_ctx is None or reloaded:
        return request_ctx
    return min(request_ctx, loaded_ctx)


def may_have_reloaded(load_duration_ns: int) -> bool:
    """Whether a reply's `load_duration` leaves room for a (re)load (RELOAD_NS)."""
    return load_duration_ns > RELOAD_NS

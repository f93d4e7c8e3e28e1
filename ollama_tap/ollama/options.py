"""A request's effective runner options (Ollama's `needsReload` fields) and their diff.

Rule L2 of docs/diagnoses.md ("Runner options"), after Ollama's `sched.go:1381-1431` (fb30760).
An option the request leaves unset is absent here ("auto"); Ollama's defaults are applied
where they decide a comparison: `num_gpu` < 0 is the default, `num_thread` and
`draft_num_predict` 0 are unset, `num_ctx` is raised to 4 (2048 for vision models) and
capped at the training context, `shift` is resolved (true except for `deepseek2`).
A Modelfile's `PARAMETER`s (/api/show `parameters`, `ModelFacts.params`) apply under the
request's options, as `modelOptions` applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import orjson

from ollama_tap.facts import ModelFacts
from ollama_tap.ollama.payloads import count_or_none
from ollama_tap.ollama.version import LLAMA_SERVER, Version

INT_FIELDS: Final = ("num_batch", "num_gpu", "main_gpu", "num_thread", "draft_num_predict")
NEEDS_RELOAD: Final = ("num_ctx", *INT_FIELDS, "use_mmap", "shift")
"""Every field a change of which reloads the runner, in the order a diff lists them."""
AUTO: Final = "auto"
NO_SHIFT_FAMILIES: Final = frozenset({"deepseek2"})
"""`supportsContextShift` is false for these (`sched.go:129-147`)."""
VISION_FLOOR: Final = 2048
"""`getRunner` raises a vision model's num_ctx to at least this (fb30760 `sched.go`)."""
DEFAULT_BATCH: Final = 512
"""`api.DefaultOptions` NumBatch: what a request that leaves num_batch unset compares as."""
AUTO_BATCHES: Final = frozenset({256, 512, 1024, 2048})
"""The batches `automaticGenerationBatch` may choose for a runner loaded with num_batch
unset (fb30760 `llm/llama_server.go`): an explicit one of these may equal it."""
DRAFT_DEFAULT: Final = 4
"""`draft_num_predict`'s default for a model with a draft model (fb30760 `api/types.go`)."""
_ZERO_DURATION: Final = re.compile(r"[+-]?(?:0+(?:\.0*)?(?:ns|us|µs|μs|ms|s|m|h)?)+")
_SHIFT: Final = b'"shift"'


def is_zero_keep_alive(value: Any) -> bool:
    """Whether `keep_alive` asks for an unload as soon as the request ends (0, "0", "0s")."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    return isinstance(value, str) and _ZERO_DURATION.fullmatch(value.strip()) is not None


def shift_field(body: bytes | None) -> bool | None:
    """The request's top-level `shift`, when it is a boolean; the body is parsed only when
    it holds the key, so ordinary requests cost one byte search."""
    if not body or _SHIFT not in body:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = data.get("shift") if isinstance(data, dict) else None
    return value if isinstance(value, bool) else None


def runner_options(
    options: dict[str, Any] | None,
    shift: bool | None,
    facts: ModelFacts,
    version: Version | None,
) -> dict[str, Any]:
    """The `needsReload` fields a request's runner would be loaded with; unset ones absent.
    Runs for every request: only the fields the request set are looked at."""
    modern = version is None or version >= LLAMA_SERVER
    out: dict[str, Any] = {}
    opts = options or {}
    if facts.params:  # the Modelfile's, under the request's own (`modelOptions`)
        opts = {**dict(facts.params), **opts}
    for field in _RELOAD_FIELDS.intersection(opts):
        value = _runner_value(field, opts[field], facts, modern)
        if value is not None:
            out[field] = value
    if modern:
        out["shift"] = shift if shift is not None else facts.family not in NO_SHIFT_FAMILIES
    return out


_RELOAD_FIELDS: Final = frozenset(NEEDS_RELOAD) - {"shift"}
"""The fields read from `options` (`shift` is a top-level field of the request)."""
_ZERO_IS_UNSET: Final = frozenset({"num_thread", "draft_num_predict"})


def runner_num_ctx(value: Any, facts: ModelFacts) -> int | None:
    """A requested `num_ctx` as the runner gets it (None: unset): raised to 4, or to 2048
    for a vision model, then capped at the training context (`sched.go` `getRunner`, read
    at fb30760; the floor of 4 since v0.1.x, `GetRunner`)."""
    num_ctx = count_or_none(value)
    if not num_ctx:
        return None
    num_ctx = max(num_ctx, VISION_FLOOR if facts.vision else 4)
    return min(num_ctx, facts.train_ctx) if facts.train_ctx else num_ctx


def _runner_value(field: str, value: Any, facts: ModelFacts, modern: bool) -> Any:
    """One option as the runner would be loaded with it; None when it leaves the default."""
    if field == "num_ctx":
        return runner_num_ctx(value, facts)
    if field == "use_mmap":
        return value if isinstance(value, bool) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    number = int(value)
    if field == "num_gpu" and number < 0:
        return None
    if field in _ZERO_IS_UNSET and number == 0:
        return None
    if field == "draft_num_predict" and not modern:
        return None
    return number


@dataclass(frozen=True, slots=True)
class Change:
    """One field whose value differs between the resident runner and a request."""

    field: str
    old: Any
    new: Any
    certain: bool = True
    """False when Ollama may find them equal: an automatic value it chose (num_batch,
    use_mmap) or a draft default the proxy cannot see. An uncertain change is not
    predicted (no warning), but it is the cause when a load does follow."""

    @property
    def text(self) -> str:
        return f"{self.field} {_shown(self.old)} → {_shown(self.new)}"

    def as_json(self) -> dict[str, Any]:
        return {"field": self.field, "from": self.old, "to": self.new}


def _shown(value: Any) -> str:
    if value is None:
        return AUTO
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def reload_changes(
    runner: dict[str, Any] | None,
    runner_ctx: int | None,
    request: dict[str, Any],
    auto_ctx: int | None,
) -> list[Change]:
    """The fields that make Ollama reload a resident runner for this request (rule L2).

    `runner` is the loader's options (None: the proxy did not see that load, so only an
    explicit `num_ctx` against `/api/ps` can be told), `runner_ctx` the `context_length`
    /api/ps shows, `auto_ctx` the context an "auto" request was last loaded with.
    """
    changes: list[Change] = []
    old_ctx = runner_ctx if runner_ctx is not None else (runner or {}).get("num_ctx")
    new_ctx = request.get("num_ctx")
    if new_ctx is not None:
        if old_ctx is not None and new_ctx != old_ctx:
            changes.append(Change("num_ctx", old_ctx, new_ctx))
    elif runner is not None and "num_ctx" in runner and (auto_ctx is None or auto_ctx != old_ctx):
        # An explicit runner followed by an auto request reloads, back to the default.
        changes.append(Change("num_ctx", old_ctx, auto_ctx))
    if runner is None:
        return changes
    for field in NEEDS_RELOAD[1:]:
        old, new = runner.get(field), request.get(field)
        if field == "num_gpu" and new is None:
            continue  # a request with the default never reloads
        if old != new and (certain := _certain(field, old, new)) is not None:
            changes.append(Change(field, old, new, certain))
    return changes


def _certain(field: str, old: Any, new: Any) -> bool | None:
    """For two different values of `field` (None: unset), whether `needsReload` (fb30760
    `sched.go:1381-1431`) surely reloads (True), may (False) or surely does not (None).

    num_batch: an unset request compares as 512 against an explicit runner; an explicit
    request compares against the batch an automatic runner chose. use_mmap: an unset
    request matches a runner that chose its own value, not an explicit one. An unset
    draft_num_predict is 4 for models with a draft."""
    if field == "num_batch":
        if new is None:
            return True if old != DEFAULT_BATCH else None
        return old is not None or new not in AUTO_BATCHES
    if field == "use_mmap":
        return old is not None
    if field == "draft_num_predict":
        return {old, new} != {None, DRAFT_DEFAULT}
    return True

"""The reload guard (`--reload-guard`, off by default): a request that would reload a resident
runner only for options that change its speed or make its context smaller goes upstream with
the runner's values instead, and nothing else of its body changes.

Ollama reloads a resident runner whenever the request's runner options differ from the
runner's (`needsReload`: `reflect.DeepEqual` of `api.Runner`, server/sched.go:671-709 at
v0.24.0; fb30760 `sched.go:1381-1431` adds `shift` and the draft options, rule L2 of
docs/diagnoses.md). A reload takes seconds, drops the runner's prompt cache, and where
memory is short evicts another app's model. The guard rewrites only these (`GUARDED`):

- `num_ctx` smaller than the runner's: the larger context holds every prompt the smaller
  one would, so the answer is the same for every prompt that fits the smaller one (a longer
  prompt is cut less, not more, and an output without `num_predict` may run longer: Ollama
  bounds it at 10 × the context). Only a value the request sets: a request that leaves
  num_ctx unset is not given one.
- `num_batch` and `num_thread`, any value: the prompt-processing batch and the CPU threads
  decide how fast tokens come, not which (up to floating-point rounding in the batch sums).

Never `num_gpu`, `main_gpu` (where the weights live: an operator's placement), `use_mmap`,
`shift` (what happens at the context's end) or `draft_num_predict`. The guard acts only
when its rewrite spares the reload: a request that would reload for any other field too, or
whose runner's value the proxy does not know, goes as it came. So does every body that is
not one JSON object of /api/generate, /api/chat, /api/embed or /api/embeddings, or that is
larger than --body-tee-limit.

The rewrite replaces the bytes of each value and nothing around them (the result is parsed
and compared with the intended object; any doubt sends the body unchanged). The relay
sends it with its own Content-Length; the record keeps the body as sent and the fact
(`Exchange.reload_guard`) the client's values; the log line names the client.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter

from ollama_tap.exchange import Exchange
from ollama_tap.facts import GuardedField, Rewrite
from ollama_tap.hooks import Phase
from ollama_tap.metrics.families import RELOAD_GUARD_REWRITES
from ollama_tap.metrics.registered import Children, counter
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.options import Change
from ollama_tap.ollama.payloads import json_object
from ollama_tap.ollama.request import request_fields
from ollama_tap.ollama.routes import endpoint_of

GUARDED: Final = ("num_ctx", "num_batch", "num_thread")
"""The runner options the guard may set to the resident runner's value (see above)."""
ROUTES: Final = frozenset({"/api/generate", "/api/chat", "/api/embed", "/api/embeddings"})
"""The native routes whose `options` Ollama reads (the /v1 ones ignore them)."""
_NUMBER: Final = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_VALUE: Final = {
    name: re.compile(rb'"' + name.encode() + rb'"[ \t\r\n]*:[ \t\r\n]*(' + _NUMBER + rb")")
    for name in GUARDED
}

log = structlog.get_logger("ollama_tap.guard")


class Residency(Protocol):
    """What the guard asks of the load tracker (ollama_tap/loads/tracker.py)."""

    def reload_for(self, model: str, options: dict[str, Any] | None, body: bytes) -> list[Change]:
        """The fields that would reload the resident runner of `model` (empty: none)."""
        ...


class ReloadGuard:
    """Rewrites a body before it goes (`rewrite`, called by the relay), then logs and counts
    each rewrite at the `request` hook, once the client's name is known."""

    name = "reload_guard"
    phase = Phase.SINK

    def __init__(
        self, residency: Residency, registry: CollectorRegistry, labels: ModelLabels
    ) -> None:
        self.residency = residency
        self.labels = labels
        made = counter(registry, RELOAD_GUARD_REWRITES)
        self.rewrites: Children[Counter] = Children(
            made.labels, made.remove, RELOAD_GUARD_REWRITES.labels
        )
        labels.on_free(lambda model: self.rewrites.drop("model", model))

    @staticmethod
    def covers(method: str, raw_path: str) -> bool:
        """Whether a request may be rewritten: its body is then read whole before it goes."""
        return method == "POST" and endpoint_of(raw_path) in ROUTES

    def rewrite(self, ex: Exchange, body: bytes, residency: Residency | None = None) -> bytes:
        """`body` as it goes upstream: with the guarded options set to the resident runner's
        when they alone would reload it (`ex.reload_guard` then says so), else unchanged.
        `residency` is the routed box's load tracker with several boxes (the first box's
        otherwise)."""
        obj = json_object(body)
        if obj is None:
            return body
        fields = request_fields(obj)
        model, options = fields.model, fields.options
        if model is None or options is None:
            return body
        guarded = _guarded((residency or self.residency).reload_for(model, options, body), options)
        if not guarded:
            return body
        sent = _spliced(body, obj, guarded)
        if sent is None:
            log.info("reload_guard_unsure", model=model, request=ex.id)
            return body
        ex.reload_guard = Rewrite(model, guarded)
        return sent

    def spares(self, ex: Exchange, changes: list[Change]) -> tuple[GuardedField, ...]:
        """The fields the guard would set for `ex`, parsed, on a runner that these `changes`
        (its reload prediction) say would reload: empty when it would not act. The router
        asks it before the body goes, so that a box whose reload the guard spares counts as
        one that would not reload (boxes/router.py, tier a). `rewrite` then makes it, unless
        it cannot place a value for sure (`reload_guard_unsure`, logged: the body goes as it
        came, and reloads)."""
        options = ex.request.options
        if ex.method != "POST" or ex.endpoint not in ROUTES or options is None:
            return ()
        return _guarded(changes, options)

    def request(self, ex: Exchange) -> None:
        rewrite = ex.reload_guard
        if rewrite is None:
            return
        self.rewrites[(self.labels.label(rewrite.model),)].inc()
        log.info(
            "reload_guard_rewrite", model=rewrite.model, client=ex.client_name or None,
            address=ex.client, request=ex.id, changes=[f.text for f in rewrite.fields],
        )  # fmt: skip


def _guarded(changes: list[Change], options: dict[str, Any]) -> tuple[GuardedField, ...]:
    """The rewrite that spares the reload `changes` predict, if it takes only guarded fields
    the request set, each to a known runner value; empty otherwise."""
    certain = [c for c in changes if c.certain]
    out: list[GuardedField] = []
    for c in certain:
        if c.field not in GUARDED or c.field not in options or not isinstance(c.old, int):
            return ()
        if c.field == "num_ctx" and not (isinstance(c.new, int) and c.new < c.old):
            return ()
        out.append(GuardedField(c.field, options[c.field], c.old))
    return tuple(out)


def _spliced(body: bytes, obj: dict[str, Any], guarded: tuple[GuardedField, ...]) -> bytes | None:
    """`body` with the bytes of each guarded value replaced (the last occurrence of its key:
    Go's decoder keeps the last of duplicates), every other byte as it was; None unless the
    result parses to exactly `obj` with those values changed."""
    key = [k for k in obj if k.lower() == "options"][-1]
    expected = {**obj, key: {**obj[key], **{f.field: f.resident for f in guarded}}}
    out = body
    for f in guarded:
        found = list(_VALUE[f.field].finditer(out))
        if not found:
            return None
        start, end = found[-1].span(1)
        out = out[:start] + str(f.resident).encode() + out[end:]
    return out if json_object(out) == expected else None

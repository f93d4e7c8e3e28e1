"""The observer that gives each finished exchange its truncation verdict (rules.py), counts
it, and leaves it on the exchange (`Exchange.truncation`) for the recorder and the spans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import structlog
from prometheus_client import CollectorRegistry

from ollama_tap.cloud import LOCAL, location
from ollama_tap.exchange import Exchange
from ollama_tap.facts import Standing
from ollama_tap.hooks import Phase
from ollama_tap.measures import request_num_ctx
from ollama_tap.metrics.families import TRUNCATIONS
from ollama_tap.metrics.registered import Children, counter
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.options import runner_num_ctx
from ollama_tap.ollama.request import honoured_options
from ollama_tap.ollama.state import LoadedModel
from ollama_tap.ollama.version import parse_version
from ollama_tap.truncation.context import Runtime, may_have_reloaded, runtime_context
from ollama_tap.truncation.history import Conversations
from ollama_tap.truncation.rules import judge

NAME: Final = "truncation"

log = structlog.get_logger("ollama_tap.truncation")


class Upstream(Protocol):
    """What the observer asks of the poller, when no analyser asked before it."""

    def standing(self, model: str | None) -> Standing: ...

    def loaded(self, model: str | None) -> LoadedModel | None: ...


class TruncationObserver:
    """Runs the rules once per exchange, at its end, for local models only (C4: a cloud
    model's context is not the box's); counts `ollama_tap_truncations_total`."""

    name = NAME
    phase = Phase.ANALYSIS

    def __init__(
        self,
        registry: CollectorRegistry,
        labels: ModelLabels,
        upstream: Upstream | None = None,
        stale_row: Callable[[Exchange], bool] | None = None,
    ) -> None:
        made = counter(registry, TRUNCATIONS)
        self.counts = Children(made.labels, made.remove, TRUNCATIONS.labels)
        self.labels = labels
        self.upstream = upstream
        self.stale_row = stale_row
        self.conversations = Conversations()
        """T5's memory of recent chats (history.py)."""
        """Whether /api/ps may describe another runner than the one that served an exchange
        (the load tracker knows; it must not have seen the exchange's `response` yet)."""
        labels.on_free(lambda model: self.counts.drop("model", model))

    def response(self, ex: Exchange) -> None:
        if location(ex) != LOCAL:
            return
        rt = self.runtime(ex)
        verdict = judge(ex, rt)
        if ex.endpoint == "/api/chat" and ex.status == 200 and ex.usage is not None:
            p = ex.usage.prompt_eval_count
            dropped = self.conversations.judge(ex, rt, p) if p is not None else None
            verdict = verdict or dropped
        if verdict is None:
            return
        ex.truncation = verdict
        self.counts[ex.endpoint, self.labels.label(ex.model), verdict.kind.value].inc()
        log.warning(
            "truncation", id=ex.id, model=ex.model, kind=verdict.kind.value,
            rule=verdict.rule, context=rt.context, explanation=verdict.explanation,
        )  # fmt: skip

    def runtime(self, ex: Exchange) -> Runtime:
        """C and what else the rules need, from the request (its num_ctx as the runner gets
        it: /v1 bodies' options ignored, the floors and the cap applied) and what the box's
        poller knew of the model (`Exchange.standing`, asked here when no analyser did) and
        its /api/ps row as the end finds it."""
        upstream = self.upstream
        if upstream is None:
            return Runtime(request_num_ctx(honoured_options(ex)), None)
        known = ex.standing
        if known is None:
            known = ex.standing = upstream.standing(ex.model)
        facts = known.facts
        asked = request_num_ctx(honoured_options(ex))
        asked = runner_num_ctx(facts.param("num_ctx") if asked is None else asked, facts)
        reloaded = ex.usage is not None and may_have_reloaded(ex.usage.load_duration)
        reloaded = reloaded or (self.stale_row is not None and self.stale_row(ex))
        row = upstream.loaded(ex.model)
        c = runtime_context(asked, row.context_length if row else None, reloaded=reloaded)
        soft = row is not None and row.format == "safetensors"
        return Runtime(c, parse_version(known.version), facts.train_ctx, soft, facts.num_keep)

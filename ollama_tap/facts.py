"""What an analysing observer finds out about an exchange and leaves on it for the others.

Each fact is a typed field of the Exchange (`Exchange.truncation`, `Exchange.load_event`),
set by one observer of the `ANALYSIS` phase (ollama_tap/hooks.py) and read by the sinks
(the recorder's row, the span attributes); what the box's poller knew of the model
(`Exchange.standing`) is asked once by the first analyser that needs it and read by the
others. The types live here, not beside the observer
that makes them, so a reader never imports another observer's module to read a fact, and
the Exchange can name them without importing any observer. The one fact the relay leaves,
the trace ids it told the upstream (`Exchange.propagated`), is here for the same reason.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext


class TruncationKind(enum.StrEnum):
    """What a truncation rule found: the `kind` label of ollama_tap_truncations_total."""

    PROMPT_TRUNCATED = "prompt_truncated"
    REFUSED = "refused"
    CONTEXT_SHIFT = "context_shift"
    OUTPUT_CUT = "output_cut"
    EMBED_TRUNCATED = "embed_truncated"
    HISTORY_DROPPED = "history_dropped"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A truncation or overflow verdict on one exchange (ollama_tap/truncation/rules.py)."""

    kind: TruncationKind
    rule: str
    """The rule that found it (T1–T3, T5, T7–T9 of docs/diagnoses.md)."""
    context: int | None
    """The C the rule used."""
    tokens_lost: int | None
    """Prompt tokens Ollama dropped, when the reply lets one count them (T2)."""
    prompt_tokens: int | None
    """The prompt's length as the reply or the error reports it."""
    explanation: str

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "rule": self.rule,
            "context": self.context,
            "tokens_lost": self.tokens_lost,
            "prompt_tokens": self.prompt_tokens,
            "explanation": self.explanation,
        }


class ModelFacts:
    """What /api/show told about a model that its runner options depend on (the load
    tracker's L2, the truncation rules' C). Never changed once made: the poller's
    `ShownModels` makes one per model shown and hands that one to every exchange of the
    model. A plain class, not a frozen dataclass: a frozen dataclass's `__init__` runs
    interpreted even in a compiled caller, some 6,000 instructions an exchange."""

    __slots__ = ("family", "hidden", "num_keep", "params", "train_ctx", "vision")

    def __init__(
        self,
        family: str = "",
        train_ctx: int | None = None,
        vision: bool = False,
        num_keep: int | None = None,
        params: tuple[tuple[str, Any], ...] = (),
        hidden: str | None = None,
    ) -> None:
        self.family = family
        self.train_ctx = train_ctx
        """The training context (`<arch>.context_length`), None when not shown."""
        self.vision = vision
        self.num_keep = num_keep
        """The Modelfile's `PARAMETER num_keep` (truncation, not reloads)."""
        self.params = params
        """The Modelfile's `PARAMETER`s that set runner options (num_ctx, num_batch, …), as
        (name, value): Ollama applies them under the request's own options
        (`modelOptions`), and a Modelfile num_ctx makes the context explicit
        (`usesAutomaticNumCtx`)."""
        self.hidden = hidden
        """The Modelfile's FROM, ADAPTER and DRAFT lines (the weights, adapters, projectors
        and draft model a runner is started with), None when not shown: two names that
        show the same run on one runner when their options match."""

    def param(self, name: str) -> Any:
        """One of `params`, None when the Modelfile does not set it."""
        for key, value in self.params:
            if key == name:
                return value
        return None

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.family, self.train_ctx, self.vision, self.num_keep, self.params, self.hidden
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelFacts) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            "ModelFacts(family={!r}, train_ctx={!r}, vision={!r}, num_keep={!r}, params={!r}, "
            "hidden={!r})".format(*self._fields())
        )


NO_FACTS: Final = ModelFacts()
"""What is known of a model /api/show has not told about (or not yet)."""


class Standing:
    """What one box's poller knew of an exchange's model beyond /api/ps when the exchange
    was analysed (`Polled.standing`, one lookup): the load tracker reads it at
    `request`, the truncation rules at `response`. Not the /api/ps row: a read between the
    request and its end may list a runner an earlier request loaded, and the rules judge by
    the row as the end finds it. Made once per exchange and never changed (a plain class
    for the reason `ModelFacts` is one)."""

    __slots__ = ("digest", "facts", "version")

    def __init__(self, digest: str | None, facts: ModelFacts, version: str | None) -> None:
        self.digest = digest
        """The manifest digest per /api/tags (else /api/ps); None while unknown."""
        self.facts = facts
        self.version = version
        """Ollama's version per /api/version; None before the first read."""


class LoadRole(enum.StrEnum):
    """What an exchange had to do with a model load."""

    TRIGGER = "trigger"
    """Its request made the runner load (the earliest of the requests that waited for it)."""
    WAITED = "waited"
    """It waited for a load another request triggered."""


@dataclass(frozen=True, slots=True)
class LoadFact:
    """The model load an exchange triggered or waited for, as it stood at the exchange's end.

    `event` is a copy (ollama_tap/loads/events.py, `LoadEvent.as_json`): the tracker goes on
    amending its event as later requests wait for the same load, while the record of this
    exchange is written in another thread.
    """

    event: dict[str, Any]
    role: LoadRole

    def as_json(self, *, with_client: bool = True) -> dict[str, Any]:
        """The event and the role; the client address only `with_client` (full records)."""
        found = {**self.event, "role": self.role.value}
        if not with_client:
            found["address"] = None
        return found


@dataclass(frozen=True, slots=True)
class GuardedField:
    """One runner option the reload guard set to the resident runner's value."""

    field: str
    sent: Any
    """The client's value."""
    resident: Any
    """The resident runner's value, which went upstream instead."""

    @property
    def text(self) -> str:
        return f"{self.field} {self.sent} → {self.resident}"


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A request body the reload guard changed before it went upstream (ollama_tap/guard.py,
    `--reload-guard`): the options that would have reloaded the resident runner of `model`,
    and nothing else, each set to the runner's value. The only change the proxy makes to a
    body (docs/transparency.md)."""

    model: str
    fields: tuple[GuardedField, ...]

    @property
    def text(self) -> str:
        return ", ".join(f.text for f in self.fields)

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "changes": [{"field": f.field, "from": f.sent, "to": f.resident} for f in self.fields],
        }


class RouteTier(enum.StrEnum):
    """Why the router sent an exchange to its box (docs/boxes.md, "Routing")."""

    RESIDENT = "resident"
    """(a) its model is resident there and this request would not reload it."""
    LOADABLE = "loadable"
    """(b) the box has the model and can load it without evicting a busy model."""
    LISTED = "listed"
    """(c) the box has the model (a load there may evict or reload a busy one)."""
    UNLISTED = "unlisted"
    """No box lists the model (or the request names none): the least busy box."""
    NAMED = "named"
    """The X-Ollama-Tap-Upstream header named the box."""
    FAILOVER = "failover"
    """The box chosen first refused the connection before any reply byte: the next one."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where an exchange went among several boxes, and why, in words (boxes/router.py)."""

    box: str
    tier: RouteTier
    reason: str
    """e.g. "llama3.2 resident on gpu2 with num_ctx 8192; gpu1 would have reloaded for
    num_ctx 4096 → 8192"."""

    def as_json(self) -> dict[str, Any]:
        return {"box": self.box, "tier": self.tier.value, "reason": self.reason}


class TraceIds:
    """What the upstream was told in its `traceparent` (`Exchange.propagated`; chosen with
    the request head by ollama_tap/tracecontext.py, taken by the spans at the end): the
    app's context as the propagators read it (the spans'
    parent; None when the app sent none of their headers) and the CLIENT span's context, in
    the app's trace or, when it sent none, in a new one (sampled, as the SDK's default
    sampler would decide)."""

    __slots__ = ("client", "context")

    def __init__(self, context: Context | None, client: SpanContext) -> None:
        self.context = context
        self.client = client

    @property
    def trace_id(self) -> int:
        return self.client.trace_id

    @property
    def client_span_id(self) -> int:
        return self.client.span_id

    def headers(self) -> dict[str, str]:
        """`traceparent`, and `tracestate` when the app's context had one, as the SDK's W3C
        propagator writes them."""
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        span = set_span_in_context(NonRecordingSpan(self.client))
        TraceContextTextMapPropagator().inject(carrier, span)
        return carrier

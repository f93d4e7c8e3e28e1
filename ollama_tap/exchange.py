"""The Exchange: one request and its reply, the one currency passed between modules."""

from __future__ import annotations

import enum
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ollama_tap.facts import LoadFact, Rewrite, Route, Standing, TraceIds, Verdict
from ollama_tap.rawreply import RawReply


class Outcome(enum.StrEnum):
    """How an exchange ended; one enum for the Exchange, the recorder and the metrics."""

    OK = "ok"
    UPSTREAM_ERROR = "upstream_error"
    """Ollama answered with a status >= 400."""
    STREAM_ERROR = "stream_error"
    """An error line or event arrived after output began (the status stays 200)."""
    INCOMPLETE = "incomplete"
    """A stream ended without its final object or terminal event."""
    CLIENT_DISCONNECTED = "client_disconnected"
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    PROXY_ERROR = "proxy_error"
    SHUTDOWN = "shutdown"
    """The proxy stopped (grace period over) while the exchange was in flight."""


class Retry(enum.StrEnum):
    """Why a request was sent a second time, on a fresh connection (relay/retry.py): the
    reused connection it went out on ended before any byte of the reply came."""

    CLOSED = "reused_connection_closed"
    """The upstream closed it (end of file)."""
    RESET = "reused_connection_reset"
    """The upstream reset it (or writing the request to it failed)."""


class OutputKind(enum.StrEnum):
    """What an output piece carries."""

    CONTENT = "content"
    THINKING = "thinking"
    TOOL_CALL = "tool_call"


@dataclass(slots=True, init=False)
class OutputChunk:
    """One output piece as relayed to the client (the argument of the `chunk` hook)."""

    at: float
    """Monotonic time the bytes carrying it were written to the client."""
    kind: OutputKind
    text: str
    """The piece itself (content, thinking, or tool-call JSON); may be empty for tool calls."""
    nbytes: int
    """Size of the line or event that carried it."""

    def __init__(self, at: float, kind: OutputKind, text: str, nbytes: int) -> None:
        # Written out: one is made per token (docs/architecture.md, mypyc).
        self.at, self.kind, self.text, self.nbytes = at, kind, text, nbytes

    def __reduce__(self) -> tuple[type[OutputChunk], tuple[float, OutputKind, str, int]]:
        # Compiled, copy and pickle would otherwise call __init__ without arguments.
        return OutputChunk, (self.at, self.kind, self.text, self.nbytes)


class OutputText(Protocol):
    """The output text an observer keeps of a reply as it is relayed (the recorder's
    timeline, in full record mode), for the others to read at the exchange's end."""

    def runs(self) -> list[tuple[OutputKind, str]] | None:
        """The text as runs of one kind, each tool call a run of its own; None when no
        text is kept."""


@dataclass(slots=True, init=False)
class Usage:
    """Token counts and Ollama's own timings from the final object or usage event.

    Durations are in nanoseconds as Ollama reports them; a field Ollama omitted is 0,
    except `prompt_eval_cached_count`, which is None when the reply did not carry it
    (older Ollama), because 0 and "unknown" mean different things for the prefill rate.
    `prompt_eval_count` is None when a compatibility usage left the prompt out.
    """

    total_duration: int
    load_duration: int
    prompt_eval_count: int | None
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int
    prompt_eval_cached_count: int | None
    has_timings: bool
    """True when the reply carried Ollama's native duration fields (native routes only)."""

    def __init__(
        self,
        total_duration: int = 0,
        load_duration: int = 0,
        prompt_eval_count: int | None = 0,
        prompt_eval_duration: int = 0,
        eval_count: int = 0,
        eval_duration: int = 0,
        prompt_eval_cached_count: int | None = None,
        has_timings: bool = False,
    ) -> None:
        # Written out: one is made per reply (see Exchange.__init__).
        self.total_duration, self.load_duration = total_duration, load_duration
        self.prompt_eval_count, self.prompt_eval_duration = prompt_eval_count, prompt_eval_duration
        self.eval_count, self.eval_duration = eval_count, eval_duration
        self.prompt_eval_cached_count, self.has_timings = prompt_eval_cached_count, has_timings

    # The derived figures of the README's "Measurements", defined once for every consumer.

    @property
    def queue_wait_ns(self) -> int:
        """total − load − prompt_eval − eval, clamped at 0: slot wait, templating, tokenizing."""
        phases = self.load_duration + self.prompt_eval_duration + self.eval_duration
        return max(0, self.total_duration - phases)

    @property
    def context_size(self) -> int:
        return (self.prompt_eval_count or 0) + self.eval_count

    @property
    def decode_rate(self) -> float | None:
        """eval_count / eval_duration (tokens/s), only for ≥ 2 tokens over ≥ 1 ms."""
        if self.eval_count < 2 or self.eval_duration < MS_NS:
            return None
        return self.eval_count / (self.eval_duration / 1e9)

    @property
    def prefill_tokens(self) -> int | None:
        """Prompt tokens actually processed (not served from the KV cache); None when
        Ollama did not report the cached count, because then nobody can tell."""
        if self.prompt_eval_cached_count is None or self.prompt_eval_count is None:
            return None
        return self.prompt_eval_count - self.prompt_eval_cached_count

    @property
    def prefill_rate(self) -> float | None:
        """Uncached prompt tokens / prompt_eval_duration, when both are > 0."""
        tokens = self.prefill_tokens
        if tokens is None or tokens <= 0 or self.prompt_eval_duration <= 0:
            return None
        return tokens / (self.prompt_eval_duration / 1e9)


@dataclass(slots=True, init=False)
class RequestFields:
    """What the proxy learned from the request body (parsed once, when the upload ended)."""

    model: str | None
    stream: bool | None
    options: dict[str, Any] | None
    think: Any
    keep_alive: Any
    format: Any
    raw: bool | None
    parsed: bool
    """False when the body was absent, not JSON, not an object, or above the tee cap."""
    truncated: bool
    """True when the body was larger than the tee cap, so the fields are unknown."""

    def __init__(
        self,
        model: str | None = None,
        stream: bool | None = None,
        options: dict[str, Any] | None = None,
        think: Any = None,
        keep_alive: Any = None,
        format: Any = None,
        raw: bool | None = None,
        parsed: bool = False,
        truncated: bool = False,
    ) -> None:
        # Written out: one is made per request (see Exchange.__init__).
        self.model, self.stream, self.options = model, stream, options
        self.think, self.keep_alive, self.format = think, keep_alive, format
        self.raw, self.parsed, self.truncated = raw, parsed, truncated


MS_NS = 1_000_000
"""One millisecond in Ollama's unit; the decode-rate guard's minimum duration."""

_ids = itertools.count(1)
_id_prefix = f"{os.getpid():x}{int(time.time()):x}"


def new_id() -> str:
    """A short id, unique per process run and sortable within it."""
    return f"{_id_prefix}-{next(_ids):08d}"


@dataclass(slots=True, init=False)
class Exchange:
    """One client request and what became of it.

    The relay's driver (relay/tap.py) fills it as the exchange unfolds and emits hooks;
    observers read it.
    Times are monotonic seconds (`time.monotonic()`), except `started_wall`.
    Every exchange ends in exactly one `response` or `error` hook, never both.
    """

    method: str
    path: str
    """The decoded path, credential path parameters redacted (`;token=[redacted]`)."""
    query: str
    endpoint: str
    """A fixed route template (see `ollama.endpoint_of`), never the raw path."""
    client: str
    """Peer address of the client."""
    client_name: str
    """Which app sent it, as the app said (ollama_tap/attribution.py): never folded into
    `other`, at most 64 characters; set at the `request` hook, "" before."""
    client_label: str
    """The same name as a metric label: bounded, `other` past the cap; "" before `request`."""
    request_headers: dict[str, str]
    """The client's request headers as received (credentials included: observers that store
    anything must redact them)."""
    id: str
    started: float
    """When the request head arrived; the zero of every client-side time."""
    started_wall: float
    request: RequestFields
    request_body: bytes | None
    """A bounded copy of the request body as it went upstream (JSON routes only), None when
    not teed; `reload_guard` says what the client had sent differently."""
    request_bytes: int
    """Bytes of request body relayed upstream (as rewritten by the reload guard), or read for
    the record after the upstream had answered (relay/tap.py)."""

    status: int | None
    response_headers: dict[str, str]
    content_type: str
    streamed: bool
    """True iff the reply's Content-Type is NDJSON or SSE (never judged by the request)."""
    response_started: float | None
    """When the upstream's status line and headers arrived."""
    response_bytes: int
    """Bytes of response body written to the client."""

    first_output: float | None
    """When the first output chunk (any kind) was written: time to first token."""
    first_content: float | None
    """When the first non-thinking output chunk was written: time to first content."""
    last_output: float | None
    output_events: int
    first_created_at: str | None
    """Ollama's `created_at` of the first output chunk (server TTFT)."""
    final_created_at: str | None
    done_reason: str | None
    usage: Usage | None
    final: dict[str, Any] | None
    """The final object (native) or the single JSON reply, when parsed."""
    error_message: str | None
    """Ollama's error text (error body or error line), or the proxy's own."""
    retried: Retry | None
    """Why the request was sent again, once, on a fresh connection; None when sent once."""
    raw_reply: RawReply | None
    """Where the relay keeps the reply body's bytes as relayed, when an observer asked for
    them at the `request` hook (the recorder in full mode); None otherwise or once dropped.
    The one capability an observer has over the data path (ollama_tap/hooks.py)."""

    propagated: TraceIds | None
    """The trace ids the upstream was told in its `traceparent`, chosen by the relay with
    the request head (ollama_tap/tracecontext.py), before any span exists, when
    `--otel-propagate` is on and the route gets spans; None otherwise."""

    reload_guard: Rewrite | None
    """The reload guard's change to the request body (`--reload-guard`, ollama_tap/guard.py),
    made by the relay before the request went and before `request`; None when the body went
    as the client sent it, as every body does without the guard."""

    outcome: Outcome | None
    ended: float | None

    # Facts one observer finds and others read (ollama_tap/facts.py, hooks.Phase).
    truncation: Verdict | None
    """The truncation verdict (ollama_tap/truncation/observer.py), set at `response`; None
    when no rule found one, or the model is not local."""
    box: str
    """The box (--upstream NAME) the request went to: `default` with one plain upstream;
    "" when it went to none (a refused management request, an answer made of every box)."""
    route: Route | None
    """Why the router chose that box, with several boxes (set before the request hook)."""
    load_event: LoadFact | None
    """The model load the exchange triggered or waited for (ollama_tap/loads/tracker.py),
    set at `response` or `error`; None when it met no load."""
    standing: Standing | None
    """What the box's poller knew of the model, asked once (ollama_tap/facts.py); None
    until an analyser asked."""
    output_text: OutputText | None
    """The output text kept of the reply, set at `request` by the observer that keeps it
    (the recorder in full mode) and complete at the end; None when nobody keeps it."""
    metadata: dict[str, Any]
    """Each observer's own state between its hooks, under its name; never read by another
    observer (what others read is a typed field above)."""

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        endpoint: str,
        client: str,
        request_headers: dict[str, str],
        *,
        id: str | None = None,
        started: float | None = None,
        started_wall: float | None = None,
        request: RequestFields | None = None,
    ) -> None:
        # Written out: one is made per request (docs/architecture.md, mypyc).
        self.method, self.path, self.query = method, path, query
        self.endpoint, self.client, self.request_headers = endpoint, client, request_headers
        self.client_name = self.client_label = ""
        self.id = new_id() if id is None else id
        self.started = time.monotonic() if started is None else started
        self.started_wall = time.time() if started_wall is None else started_wall
        self.request = RequestFields() if request is None else request
        self.request_body = None
        self.request_bytes = 0
        self.status = None
        self.response_headers = {}
        self.content_type = ""
        self.streamed = False
        self.response_started = None
        self.response_bytes = 0
        self.first_output = self.first_content = self.last_output = None
        self.output_events = 0
        self.first_created_at = self.final_created_at = None
        self.done_reason = None
        self.usage = None
        self.final = None
        self.error_message = None
        self.retried = None
        self.raw_reply = None
        self.propagated = None
        self.reload_guard = None
        self.outcome = None
        self.ended = None
        self.truncation = None
        self.box = ""
        self.route = None
        self.load_event = None
        self.standing = None
        self.output_text = None
        self.metadata = {}

    @property
    def model(self) -> str | None:
        """The model the request named (raw, not canonical)."""
        return self.request.model

    def elapsed(self, at: float | None) -> float | None:
        """Seconds from the request head to `at`, or None."""
        return None if at is None else at - self.started

    @property
    def duration(self) -> float | None:
        return self.elapsed(self.ended)

    @property
    def ttft(self) -> float | None:
        return self.elapsed(self.first_output)

    @property
    def ttfc(self) -> float | None:
        return self.elapsed(self.first_content)

    @property
    def output_rate(self) -> float | None:
        """(output events − 1) / (last − first output time): the observed output rate."""
        if self.output_events < 2 or self.first_output is None or self.last_output is None:
            return None
        span = self.last_output - self.first_output
        return (self.output_events - 1) / span if span > 0 else None

    def note_outputs(self, pieces: Sequence[OutputChunk]) -> None:
        """Stamp the write times of the output pieces of one read, in order (at least one):
        first output, first content, last, count."""
        if self.first_output is None:
            self.first_output = pieces[0].at
        if self.first_content is None:
            for piece in pieces:
                if piece.kind is not OutputKind.THINKING:
                    self.first_content = piece.at
                    break
        self.last_output = pieces[-1].at
        self.output_events += len(pieces)

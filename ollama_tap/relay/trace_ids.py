"""The ids `--otel-propagate` told the upstream (ollama_tap/relay/trace_context.py chooses them)."""

from __future__ import annotations


class TraceIds:
    """The trace an exchange's spans belong to and the CLIENT span's id, as the upstream
    was told them; `flags` are the app's (sampled when it sent no traceparent)."""

    __slots__ = ("client_span_id", "flags", "trace_id", "tracestate")

    def __init__(
        self, trace_id: int, client_span_id: int, flags: str, tracestate: str | None
    ) -> None:
        self.trace_id = trace_id
        self.client_span_id = client_span_id
        self.flags = flags
        self.tracestate = tracestate

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.client_span_id:016x}-{self.flags}"

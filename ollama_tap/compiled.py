"""Which modules are compiled with mypyc (setup.py), whether this process runs them
compiled, and the record of the sources a build compiled.

Plain Python with no dependencies: setup.py loads it before anything is installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

MODULES: Final = [
    "ollama_tap/exchange.py",
    "ollama_tap/rawreply.py",
    "ollama_tap/framing.py",
    "ollama_tap/ollama/routes.py",
    "ollama_tap/ollama/errors.py",
    "ollama_tap/ollama/request.py",
    "ollama_tap/ollama/payloads.py",
    "ollama_tap/ollama/readers.py",
    "ollama_tap/ollama/version.py",
    "ollama_tap/hooks.py",
    "ollama_tap/names.py",
    "ollama_tap/slots.py",
    "ollama_tap/accesslog.py",
    "ollama_tap/attribution.py",
    "ollama_tap/inflight/registry.py",
    "ollama_tap/measures.py",
    "ollama_tap/cloud.py",
    "ollama_tap/truncation/rules.py",
    "ollama_tap/truncation/observer.py",
    "ollama_tap/ollama/options.py",
    "ollama_tap/loads/events.py",
    "ollama_tap/loads/state.py",
    "ollama_tap/loads/tracker.py",
    "ollama_tap/otel/spans.py",
    "ollama_tap/otel/content.py",
    "ollama_tap/otel/parts.py",
    "ollama_tap/otel/wire.py",
    "ollama_tap/metrics/histogram.py",
    "ollama_tap/metrics/registered.py",
    "ollama_tap/metrics/observer.py",
    "ollama_tap/relay/tap.py",
    "ollama_tap/relay/tapped.py",
    "ollama_tap/relay/bodies.py",
    "ollama_tap/relay/incoming.py",
    "ollama_tap/relay/headers.py",
    "ollama_tap/relay/trace_ids.py",
    "ollama_tap/relay/trace_context.py",
    "ollama_tap/relay/retry.py",
    "ollama_tap/relay/http1/flow.py",
    "ollama_tap/relay/http1/reply.py",
    "ollama_tap/relay/http1/pool.py",
    "ollama_tap/relay/http1/request.py",
    "ollama_tap/relay/http1/serves.py",
    "ollama_tap/relay/http1/relay.py",
    "ollama_tap/relay/http1/send.py",
    "ollama_tap/relay/http1/clients.py",
    "ollama_tap/relay/http1/server.py",
    "ollama_tap/recorder/__init__.py",
    "ollama_tap/recorder/scope.py",
    "ollama_tap/recorder/timeline.py",
]
"""What runs on the event loop per request and per token, and the SDK-free parts of the
OpenTelemetry export: the span mapping (at each exchange's end) and the OTLP encoder (called
span by span from interpreted code, it holds the GIL for one span at a time). Not the
recorder's writer thread (record, redact, writer): compiled code never offers the GIL to
other threads on its own, so a large body being scrubbed there would stall the loop for its
whole length."""

RECORD: Final = ".compiled-sources"
"""Beside `ollama_tap/`: the hashes of the sources the last compiling build read. An extension
module is imported before the .py beside it, so the test suite checks a build against it."""


def source_hashes(root: Path) -> dict[str, str]:
    """The sha256 of every .py under `root`/proxy, by path relative to `root` (compiled code
    depends on the types of what it imports, so every module counts, compiled or not)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((root / "ollama_tap").rglob("*.py"))
    }


def active() -> bool:
    """Whether this process runs the compiled modules (an install without a C compiler, or
    with OLLAMA_TAP_PURE_PYTHON=1, runs them as plain Python)."""
    from ollama_tap.relay import tap

    return not (tap.__file__ or "").endswith(".py")

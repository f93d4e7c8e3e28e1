"""Which modules are compiled with mypyc (setup.py), whether this process runs them
compiled, and the record of the sources a build compiled.

Plain Python with no dependencies: setup.py loads it before anything is installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

MODULES: Final = [
    "proxy/exchange.py",
    "proxy/rawreply.py",
    "proxy/framing.py",
    "proxy/ollama/routes.py",
    "proxy/ollama/errors.py",
    "proxy/ollama/request.py",
    "proxy/ollama/payloads.py",
    "proxy/ollama/readers.py",
    "proxy/ollama/version.py",
    "proxy/hooks.py",
    "proxy/names.py",
    "proxy/slots.py",
    "proxy/accesslog.py",
    "proxy/attribution.py",
    "proxy/inflight/registry.py",
    "proxy/measures.py",
    "proxy/cloud.py",
    "proxy/truncation/rules.py",
    "proxy/truncation/observer.py",
    "proxy/loads/options.py",
    "proxy/loads/events.py",
    "proxy/loads/state.py",
    "proxy/loads/tracker.py",
    "proxy/otel/spans.py",
    "proxy/otel/content.py",
    "proxy/otel/parts.py",
    "proxy/otel/wire.py",
    "proxy/metrics/histogram.py",
    "proxy/metrics/registered.py",
    "proxy/metrics/observer.py",
    "proxy/relay/tap.py",
    "proxy/relay/incoming.py",
    "proxy/relay/headers.py",
    "proxy/relay/trace_ids.py",
    "proxy/relay/trace_context.py",
    "proxy/relay/aiohttp_relay.py",
    "proxy/relay/retry.py",
    "proxy/relay/http1/flow.py",
    "proxy/relay/http1/reply.py",
    "proxy/relay/http1/pool.py",
    "proxy/relay/http1/request.py",
    "proxy/relay/http1/serves.py",
    "proxy/relay/http1/relay.py",
    "proxy/relay/http1/send.py",
    "proxy/relay/http1/clients.py",
    "proxy/relay/http1/server.py",
    "proxy/recorder/__init__.py",
    "proxy/recorder/scope.py",
    "proxy/recorder/timeline.py",
]
"""What runs on the event loop per request and per token, and the SDK-free parts of the
OpenTelemetry export: the span mapping (at each exchange's end) and the OTLP encoder (called
span by span from interpreted code, it holds the GIL for one span at a time). Not the
recorder's writer thread (record, redact, writer): compiled code never offers the GIL to
other threads on its own, so a large body being scrubbed there would stall the loop for its
whole length."""

RECORD: Final = ".compiled-sources"
"""Beside `proxy/`: the hashes of the sources the last compiling build read. An extension
module is imported before the .py beside it, so the test suite checks a build against it."""


def source_hashes(root: Path) -> dict[str, str]:
    """The sha256 of every .py under `root`/proxy, by path relative to `root` (compiled code
    depends on the types of what it imports, so every module counts, compiled or not)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((root / "proxy").rglob("*.py"))
    }


def active() -> bool:
    """Whether this process runs the compiled modules (an install without a C compiler, or
    with OLLAMA_TAP_PURE_PYTHON=1, runs them as plain Python)."""
    from proxy.relay import tap

    return not (tap.__file__ or "").endswith(".py")

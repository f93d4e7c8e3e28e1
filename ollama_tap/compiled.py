"""Which modules are compiled with mypyc (setup.py), whether this process runs them
compiled, and the record of the sources a build compiled.

Plain Python with no dependencies: setup.py and the Makefile load it before anything is
installed.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from pathlib import Path
from typing import Final

MODULES: Final = [
    "ollama_tap/exchange.py",
    "ollama_tap/rawreply.py",
    "ollama_tap/framing.py",
    "ollama_tap/ollama/payloads.py",
    "ollama_tap/ollama/readers.py",
    "ollama_tap/hooks.py",
    "ollama_tap/metrics/histogram.py",
    "ollama_tap/metrics/observer.py",
    "ollama_tap/relay/tap.py",
    "ollama_tap/relay/tapped.py",
    "ollama_tap/relay/bodies.py",
    "ollama_tap/relay/headers.py",
    "ollama_tap/relay/http1/flow.py",
    "ollama_tap/relay/http1/reply.py",
    "ollama_tap/relay/http1/pool.py",
    "ollama_tap/relay/http1/request.py",
    "ollama_tap/relay/http1/relay.py",
    "ollama_tap/relay/http1/bounds.py",
    "ollama_tap/relay/http1/server.py",
    "ollama_tap/recorder/__init__.py",
    "ollama_tap/recorder/timeline.py",
    "ollama_tap/otel/wire.py",
    # Once per exchange, on the event loop (see below).
    "ollama_tap/ollama/routes.py",
    "ollama_tap/ollama/request.py",
    "ollama_tap/ollama/names.py",
    "ollama_tap/ollama/options.py",
    "ollama_tap/names.py",
    "ollama_tap/slots.py",
    "ollama_tap/cloud.py",
    "ollama_tap/measures.py",
    "ollama_tap/accesslog.py",
    "ollama_tap/attribution.py",
    "ollama_tap/inflight/registry.py",
    "ollama_tap/truncation/observer.py",
    "ollama_tap/truncation/rules.py",
    "ollama_tap/truncation/context.py",
    "ollama_tap/loads/tracker.py",
    "ollama_tap/loads/book.py",
    "ollama_tap/loads/state.py",
    "ollama_tap/relay/incoming.py",
    "ollama_tap/relay/http1/serves.py",
    "ollama_tap/relay/http1/send.py",
    "ollama_tap/relay/http1/clients.py",
    "ollama_tap/recorder/scope.py",
    # What the analysers ask of the poller's last reads, once or twice an exchange.
    "ollama_tap/polled.py",
    "ollama_tap/boxes/shown.py",
]
"""What runs for every relayed chunk: the transport's read and write path (the front and
upstream connections, the reply parser, flow control, the chunk framing and the bounds on
what llhttp buffers), the exchange driver, the readers that parse each line or event into
output pieces, the hooks' dispatch and the two observers with a per-chunk hook (the metrics'
inter-token histogram, the recorder's timeline and raw-reply capture). And one module that
runs per span, on the export thread: the OTLP encoder, which exists only to cost less than
the SDK's (docs/opentelemetry.md, "What it costs") and does so compiled.

And, after the comment, what runs on the event loop once for every exchange: the route and
fields of the request, the model and client labels, the in-flight set, the truncation
verdict, the load tracker's notes (and its book of runners, the base of its class: mypyc
compiles a class only on a compiled base), what these two ask of the poller's last reads
(`Polled` and the /api/show facts it holds: the poller that writes them is async and
aiohttp's), the access log line, and the front's admission, routing and early send. Left
interpreted they were the largest part of an exchange's cost beyond the build that compiled
them (f88820b): for a 20-token stream paced one token a read, 1,136,000 instructions on the
loop against 953,000 (+19 %), about +9 % CPU a chunk in `bench/overhead.py`'s `single`;
compiled, 1,011,000 (bench/instructions.py --delay 0.05; docs/performance-log.md, 2026-12-06,
"The per-exchange cost"). Each is a few hundred lines that compiled before and holds no
blocking work.

What stays interpreted runs less than once per exchange or off the loop: the poller, the
span mapping, the CLI, the recorder's writer thread (compiled code never offers the GIL to
other threads on its own, so a large body scrubbed there would stall the loop for its whole
length)."""

RECORD: Final = ".compiled-sources"
"""Beside `ollama_tap/`: the hashes of the sources the last compiling build read. An extension
module is imported before the .py beside it, so the compiled test pass checks a build
against it."""


def _imports(path: Path, root: Path) -> set[Path]:
    """The package's modules `path` imports, at any depth of its code (the name a `from a
    import b` binds may be the module a/b.py or a name in a/__init__.py: both count). Not the
    packages above a module imported by its full name: the compiled code reads nothing of
    theirs."""
    found: set[Path] = set()
    package = path.parent.relative_to(root).parts
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = (*base, *(node.module or "").split(".")) if node.module else base
            names = [list(module)] + [[*module, alias.name] for alias in node.names]
        else:
            continue
        for parts in names:
            if parts and parts[0] == "ollama_tap":
                for candidate in (Path(*parts).with_suffix(".py"), Path(*parts, "__init__.py")):
                    if (root / candidate).is_file():
                        found.add(candidate)
    return found


def sources(root: Path) -> list[str]:
    """The compiled modules and every package module they import, directly or not, by path
    relative to `root`: mypyc compiles against their types and inlines their `Final`
    constants, so an edit to any of them makes a build stale. Editing any other module (the
    CLI, the span mapping, ...) does not."""
    seen = {Path(name) for name in MODULES}
    todo = list(seen)
    while todo:
        for found in _imports(root / todo.pop(), root) - seen:
            seen.add(found)
            todo.append(found)
    return sorted(str(path) for path in seen)


def source_hashes(root: Path) -> dict[str, str]:
    """The sha256 of each of `sources(root)`."""
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in sources(root)}


def active() -> bool:
    """Whether this process runs the compiled modules (an install without a C compiler, or
    with OLLAMA_TAP_PURE_PYTHON=1, runs them as plain Python)."""
    from ollama_tap.relay import tap

    return not (tap.__file__ or "").endswith(".py")


if __name__ == "__main__":  # the Makefile: what a build depends on, one path a line
    print("\n".join(sources(Path(sys.argv[1] if len(sys.argv) > 1 else "."))))

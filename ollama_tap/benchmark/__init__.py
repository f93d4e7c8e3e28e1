"""`ollama-tap bench`: stream a workload at Ollama (or a proxy) and report what it measured.

Every request streams `/api/generate` (or `/api/chat`) and is read by the proxy's own reader
(`ollama_tap.ollama.reader_for`), so the figures mean exactly what the proxy's metrics mean (see
the README's "Measurements"); client times use `time.perf_counter` from just before the request is
sent. Figures are taken over successful requests; failed ones are counted by kind (the
`Outcome` names the metrics use). `--json` prints one document (docs/bench.md)::

    {"version": 1, "interrupted": bool, "api": "generate" | "chat",
     "workload": {"requests": int, "concurrency": int, "warmup": int, "prompts": int},
     "targets": [{"label": "A" | "B", "url": str, "model": str, "requests": int, "ok": int,
                  "errors": {kind: int}, "error_messages": {kind: [str]},
                  "warmup_errors": {kind: int}, "warmup_error_messages": {kind: [str]},
                  "figures": {name: {"unit": str, "n": int, "min": float | null,
                                     "p50": ..., "p95": ..., "p99": ..., "max": ...}},
                  "notes": {name: str}}],
     "ratios": null | {name: {"p50": float | null, "p95": ..., "p99": ...}},
     "deltas": null | {name: {"p50": float | null, "p95": ..., "p99": ...}}}

Figure names: ttft, ttfc, duration, decode_rate, output_rate, prefill_rate, load,
queue_wait, server_ttft, client_overhead; times in seconds, rates per second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from functools import partial
from typing import Any, TextIO

import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from ollama_tap.benchmark.figures import Result
from ollama_tap.benchmark.report import document, render
from ollama_tap.benchmark.request import Target
from ollama_tap.benchmark.runner import Workload, run
from ollama_tap.config import ConfigError, resolve_upstream

DEFAULT_PROMPT = "Why is the sky blue?"


def run_bench(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Exit 0 when every endpoint answered at least one request well, 1 if not, 2 on misuse,
    130 when interrupted (Ctrl-C) after reporting the requests that ended before it.

    The report goes to `out` (default: stdout at call time).
    """
    try:
        targets = _targets(args)
        workload = _workload(args)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"ollama-tap bench: {exc}", file=sys.stderr)
        return 2
    results = [Result(target) for target in targets]
    show_progress = not args.json and sys.stderr.isatty()
    try:
        _measure(results, workload, show_progress)
    except KeyboardInterrupt:
        interrupted = True  # what ended so far is reported, not lost
    else:
        interrupted = False
    doc = document(results, workload, interrupted)
    out = sys.stdout if out is None else out
    if args.json:
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(Console(file=out), doc)
    if interrupted:
        return 130
    return 0 if all(r.ok for r in results) else 1


def _targets(args: argparse.Namespace) -> list[Target]:
    options: dict[str, Any] | None = None
    if args.num_predict is not None:
        options = {"num_predict": args.num_predict}
    for flag, given in (("--url", args.url), ("--compare", args.compare)):
        if given is not None and not given.strip():
            raise ValueError(f"{flag} needs a URL (it was empty)")
    urls = [resolve_upstream(args.url, os.environ.get("OLLAMA_HOST"))]
    if args.compare is not None:
        urls.append(resolve_upstream(args.compare, None))
    return [Target(url, args.model, args.api, options) for url in urls]


def _workload(args: argparse.Namespace) -> Workload:
    prompts = [DEFAULT_PROMPT if args.prompt is None else args.prompt]
    if args.prompts is not None:
        prompts = [line for line in args.prompts.read_text().splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"{args.prompts} holds no prompt; write one prompt per line")
    return Workload(prompts, args.n, args.c, args.warmup)


def _measure(results: list[Result], workload: Workload, show_progress: bool) -> None:
    if not show_progress:
        asyncio.run(run(results, workload, lambda: None))
        return
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        total = len(results) * (workload.requests + workload.warmup)
        # escape: a model name is the user's text, not rich markup ("[/x]" would raise).
        task = progress.add_task(f"bench {escape(results[0].target.model)}", total=total)
        asyncio.run(run(results, workload, partial(progress.advance, task)))

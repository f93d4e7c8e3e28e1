"""`ollama-tap bench`: its flags; what it does is `ollama_tap.benchmark`'s."""

from __future__ import annotations

import argparse
from pathlib import Path

from ollama_tap.benchmark import DEFAULT_PROMPT, run_bench
from ollama_tap.cli.options import positive, whole
from ollama_tap.config import DEFAULT_UPSTREAM


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `bench` to the CLI's subparsers."""
    p = sub.add_parser(
        "bench",
        help="measure TTFT, rates and phases of streamed requests (optionally A vs B)",
        description="Stream requests at Ollama (or anything speaking its API) and report "
        "client and server figures with percentiles; --compare measures a second endpoint "
        "in interleaved rounds and reports B/A.",
    )
    p.add_argument("--model", required=True, metavar="NAME", help="model to run")
    p.add_argument(
        "--url",
        help=f"endpoint A (default: $OLLAMA_HOST by Ollama's rules, else {DEFAULT_UPSTREAM})",
    )
    p.add_argument("--compare", metavar="URL2", help="endpoint B, run in interleaved rounds")
    prompts = p.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", metavar="TEXT", help=f"default: {DEFAULT_PROMPT!r}")
    prompts.add_argument("--prompts", metavar="FILE", type=Path, help="one prompt per line")
    p.add_argument(
        "-n", type=positive, default=10, metavar="N", help="counted requests per endpoint [10]"
    )
    p.add_argument(
        "-c", type=positive, default=1, metavar="CONCURRENCY", help="requests in flight [1]"
    )
    p.add_argument(
        "--warmup",
        type=_natural,
        default=1,
        metavar="K",
        help="uncounted requests first, one at a time (the first loads the model) [1]",
    )
    p.add_argument(
        "--api", choices=("generate", "chat"), default="generate", help="route [generate]"
    )
    p.add_argument("--num-predict", type=positive, metavar="N", help="cap output tokens (options)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run_bench)


def _natural(text: str) -> int:
    value = whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value

"""Ollama's version as a number, for the rules that changed between releases."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

Version = tuple[int, int, int]

LLAMA_SERVER: Final = (0, 30, 0)
"""The first release on llama-server runners: truncation to C−1 (the Go runners kept C);
`shift` and `draft_num_predict` reload a runner, and `num_ctx`/`num_batch` left "auto" on
both sides never do (against the Go runners' `v0.24.0:sched.go:671-709`)."""

CACHED_COUNTED: Final = (0, 30, 1)
"""From here `prompt_eval_count` counts the whole prompt again, cached tokens included
(`llamaServerTimings.promptEvalCount`, ollama/ollama#16428); v0.30.0 reported only the tokens
llama-server did not find in its cache (`Timings.PromptN`), so a repeated prompt counted 1."""

MLX_CONTEXT: Final = (0, 30, 11)
"""From here /api/ps shows an MLX (safetensors) runner's soft `num_ctx`
(`x/mlxrunner/client.go` `reportedContextLength`); the runner enforces the model's maximum."""
SOURCE_BUILD: Final = (0, 0, 0)
"""What `/api/version` says for a build from source (`version/version.go` `Version =
"0.0.0"`, overridden only by release builds' ldflags): a current tree, so read as None."""

_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@lru_cache(maxsize=8)
def parse_version(text: str | None) -> Version | None:
    """`0.30.11-rc2` → (0, 30, 11); None (current) for anything without a leading x.y and
    for a source build's `0.0.0`, which runs the newest rules. Cached: every exchange
    asks, and the poller's answer changes only when Ollama is upgraded."""
    found = _VERSION.match(text or "")
    if found is None:
        return None
    major, minor, patch = found.groups()
    version = int(major), int(minor), int(patch or 0)
    return None if version == SOURCE_BUILD else version

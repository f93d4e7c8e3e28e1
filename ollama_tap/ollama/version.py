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

_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@lru_cache(maxsize=8)
def parse_version(text: str | None) -> Version | None:
    """`0.30.11-rc2` → (0, 30, 11); None for anything without a leading x.y. Cached: every
    exchange asks, and the poller's answer changes only when Ollama is upgraded."""
    found = _VERSION.match(text or "")
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)

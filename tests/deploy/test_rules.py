"""Prometheus config, recording and alert rules: promtool checks them and runs their tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy import stack
from tests.deploy.stack import (
    PROCESS_SERIES,
    PROMETHEUS_DIR,
    REPO,
    RULE_TESTS,
    RULES,
    SCRAPE_SERIES,
    alert_rules,
    load_yaml,
    metric_names,
    promtool,
    recording_rules,
    reference_metrics,
    run,
)

ALERTS = {
    "DecodeSlowdown",
    "DecodeSlowerAfterUpgrade",
    "TTFTHigh",
    "OllamaDown",
    "OllamaTapDown",
    "ErrorRateHigh",
    "OllamaSaturated",
    "ContextNearLimit",
    "PartialOffload",
    "RecorderDropping",
    "PromptsTruncated",
    "ModelThrashing",
    "ContextReduced",
    "OtelExportLosing",
    "UploadsStalling",
    "ConnectionsRefused",
}


def test_promtool_check_rules() -> None:
    run(promtool(), "check", "rules", str(RULES))


def test_promtool_check_config() -> None:
    run(promtool(), "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))


@pytest.fixture(scope="module")
def rule_runs() -> dict[str, stack.RuleRun]:
    """Every file's promtool run (stack.rule_runs), started together if the suite has not
    started them already: each run is one busy thread, so the suite's one thread would leave
    the other core idle through them."""
    return stack.rule_runs()


@pytest.mark.parametrize("tests", RULE_TESTS, ids=lambda p: p.stem)
def test_promtool_test_rules(tests: Path, rule_runs: dict[str, stack.RuleRun]) -> None:
    """One promtool run per file, each with its own time bound (`run`'s); skipped, saying so,
    when promtool passed these very files before (stack.RULES_PASSED)."""
    done = rule_runs[tests.name].result()
    if isinstance(done, Path):
        pytest.skip(
            f"promtool passed {tests.name} with these rules and this promtool before "
            f"(stamp {done}); OLLAMA_TAP_RULE_TESTS=fresh runs it again"
        )


def test_the_alerts_are_all_there() -> None:
    assert {r["alert"] for r in alert_rules()} == ALERTS


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_explains_itself(rule: dict[str, Any]) -> None:
    notes = rule["annotations"]
    assert {"summary", "description", "runbook"} <= set(notes)
    assert rule["labels"]["severity"] in {"warning", "critical"}
    subject = "$labels.model" if "model" in rule["annotations"]["summary"] else "$labels.instance"
    assert subject in notes["description"], "the description names what is affected"
    if rule["alert"] not in {"OllamaDown", "OllamaTapDown"}:
        assert "$value" in notes["description"], "the description gives the figure"


def test_decode_slowdown_runbook_covers_the_usual_causes() -> None:
    (rule,) = [r for r in alert_rules() if r["alert"] == "DecodeSlowdown"]
    runbook = rule["annotations"]["runbook"]
    for cause in ("offload", "OLLAMA_NUM_PARALLEL", "churn", "context"):
        assert cause in runbook


def _cases() -> dict[str, set[bool]]:
    """For each alert, whether the rule tests hold a case where it fires and one where not."""
    seen: dict[str, set[bool]] = {}
    for path in RULE_TESTS:
        for test in load_yaml(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                seen.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return seen


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_every_alert_has_a_firing_and_a_quiet_case(alert: str) -> None:
    assert _cases().get(alert) == {True, False}


def test_rules_select_the_job_and_name_contract_metrics() -> None:
    allowed = reference_metrics() | recording_rules() | SCRAPE_SERIES | PROCESS_SERIES
    for group in load_yaml(RULES)["groups"]:
        for rule in group["rules"]:
            names = metric_names(rule["expr"])
            missing = names - allowed
            assert not missing, f"{rule}: not in the README's metric reference: {missing}"
            raw = names - recording_rules()
            assert rule["expr"].count('job=~"ollama-tap"') >= len(raw), rule["expr"]


def test_docs_list_every_alert() -> None:
    lines = (REPO / "docs" / "operations.md").read_text().splitlines()
    listed = {line.split("|")[1].strip() for line in lines if line.startswith("| ")}
    named = {rule["alert"] for rule in alert_rules()}
    assert named - listed == set(), "docs/operations.md's alert table lacks these"

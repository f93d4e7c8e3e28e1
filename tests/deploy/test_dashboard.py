"""The Grafana dashboard: generated, complete, scoped to $job, and only naming real metrics."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
import yaml

from tests.deploy.stack import (
    BUILDER,
    DASHBOARD,
    PROCESS_SERIES,
    REPO,
    SCRAPE_SERIES,
    dashboard,
    metric_names,
    panels,
    promtool,
    queries,
    recording_rules,
    reference_metrics,
    run,
    substitute,
)

ROWS = [
    "Overview", "Latency", "Phases", "Throughput", "Clients", "Context", "Models", "Loads",
    "Boxes", "Proxy health",
]  # fmt: skip


def test_committed_json_is_the_builders_output() -> None:
    render = runpy.run_path(str(BUILDER))["render"]
    assert DASHBOARD.read_text() == render(), (
        "grafana/dashboards/ollama-tap.json is stale: run .venv/bin/python "
        "grafana/build_dashboard.py"
    )


def test_rows_in_order() -> None:
    rows = [p["title"] for p in dashboard()["panels"] if p["type"] == "row"]
    assert rows == ROWS


def test_schema_and_variables() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 36  # Grafana 10 and later
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) == {"datasource", "job", "instance", "model", "endpoint", "inspector"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "model", "endpoint"):
        assert 'job=~"$job"' in variables[name]["definition"]
    # "All" for job and instance is the values found, never ".*": panels that read up and
    # process_* would otherwise draw every other scrape job too.
    assert "allValue" not in variables["job"] and "allValue" not in variables["instance"]


def test_event_counts_are_drawn_once_per_step() -> None:
    # A count per step, the counter's difference from one step back: increase() over a
    # longer window drew one model load in several bars; over the step itself it missed
    # events between two windows' samples.
    counted = {"Loads and cold starts", "Records dropped"}
    for panel in panels():
        if panel["title"] not in counted:
            continue
        assert panel["interval"] == "1m", panel["title"]
        for target in panel["targets"]:
            assert "increase(" not in target["expr"], panel["title"]
            assert "offset $__interval" in target["expr"], panel["title"]


@pytest.mark.parametrize("panel", list(panels()), ids=lambda p: p["title"])
def test_panel_has_description_unit_and_datasource(panel: dict) -> None:
    assert panel["description"].strip().endswith("."), "one sentence that says what it shows"
    assert panel["fieldConfig"]["defaults"]["unit"], "every panel states its unit"
    assert panel["datasource"]["uid"] == "${datasource}"
    for target in panel["targets"]:
        assert target["datasource"]["uid"] == "${datasource}"


def test_panel_titles_are_unique() -> None:
    titles = [p["title"] for p in panels()]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("query", queries(), ids=lambda q: f"{q.panel}/{q.ref}")
def test_every_query_selects_job(query) -> None:
    selectors = query.expr.count("{")
    assert selectors > 0
    assert query.expr.count('job=~"$job"') == selectors, "every selector must scope to $job"


def test_metric_names_are_in_the_contract() -> None:
    allowed = reference_metrics() | recording_rules() | SCRAPE_SERIES | PROCESS_SERIES
    used = {name for q in queries() for name in metric_names(q.expr)}
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            used |= set(re.findall(r"label_values\(([A-Za-z_:][\w:]*)", var["definition"]))
    assert used, "no metric names parsed"
    assert used <= allowed, f"not in the README's metric reference: {sorted(used - allowed)}"


def test_decode_rate_comes_from_the_rate_pair() -> None:
    exprs = {q.panel: q.expr for q in queries()}
    rate = exprs["Decode rate"]
    assert "ollama_tap_decode_tokens_total" in rate
    assert "ollama_tap_decode_seconds_total" in rate
    assert "histogram_quantile(0.5" in exprs["Decode rate, median request"]
    assert "ollama_tap_decode_tokens_per_second_bucket" in exprs["Decode rate, median request"]


def test_figures_needing_a_newer_ollama_say_so() -> None:
    for panel in panels():
        if any("prefill_" in t["expr"] for t in panel["targets"]):
            assert "prompt_eval_cached_count" in panel["description"], panel["title"]


def test_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every query (variables filled in) as a recording rule's expression."""
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substitute(q.expr)}
        for i, q in enumerate(queries())
    ]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run(promtool(), "check", "rules", str(path))


def test_metric_name_parser() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{job=~"$job", x="b{c}"}'
        "[$__rate_interval]))) / on (model) group_left max(b_total offset 1d) > bool 1e3"
    )
    assert metric_names(expr) == {"a_bucket", "b_total"}
    assert metric_names('sum(increase(up{job=~"$job"}[5m])) or vector(0)') == {"up"}


def test_provisioning_points_at_the_dashboards() -> None:
    provider = yaml.safe_load((REPO / "grafana/provisioning/dashboards/ollama-tap.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/etc/grafana/dashboards"
    datasource = yaml.safe_load(
        (REPO / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert datasource["datasources"][0]["type"] == "prometheus"


def test_stat_panels_show_the_state_now() -> None:
    # Reduced from a range query ("last not null"), a stat kept showing what had ended: an
    # unloaded model's offload, the Ollama version before an upgrade.
    stats = [p for p in panels() if p["type"] == "stat"]
    assert stats
    for panel in stats:
        assert all(t["instant"] and not t["range"] for t in panel["targets"]), panel["title"]


def test_decode_panel_draws_the_baseline_decode_slowdown_compares_with() -> None:
    rules = yaml.safe_load((REPO / "deploy/prometheus/rules/ollama-tap.rules.yml").read_text())
    [alert] = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "DecodeSlowdown"]
    baseline = re.search(r"<\s*0\.7\s*\*\s*([\w:]+)", alert["expr"])
    assert baseline is not None, alert["expr"]
    [panel] = [p for p in panels() if p["title"] == "Decode rate by context size"]
    drawn = [t for t in panel["targets"] if baseline.group(1) in t["expr"]]
    assert len(drawn) == 1 and "baseline" in drawn[0]["legendFormat"]
    [dashed] = panel["fieldConfig"]["overrides"]
    assert re.fullmatch(dashed["matcher"]["options"], "llama3.2 le4k day before, alert baseline")
    assert "70 %" in panel["description"]


def test_the_inspector_is_one_click_away() -> None:
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["inspector"]["type"] == "textbox"
    assert variables["inspector"]["query"].endswith("/_tap/")
    assert [link["url"] for link in board["links"]] == ["${inspector}"]
    [panel] = [p for p in panels() if p["title"] == "Decode rate by context size"]
    [link] = panel["fieldConfig"]["defaults"]["links"]
    # The list reads its filters from the hash (ollama_tap/inspector/static/list.js).
    assert link["url"] == "${inspector}#/?model=${__field.labels.model}"
    index = (REPO / "ollama_tap/inspector/static/index.html").read_text()
    assert '<input name="model"' in index


def operations_table(first: str) -> list[list[str]]:
    """The rows of docs/operations.md's table whose header starts with `first`, as cells."""
    lines = (REPO / "docs" / "operations.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_docs_describe_every_panel_under_its_row() -> None:
    described: dict[str, str] = {}
    row = ""
    for cells in operations_table("row"):
        row = cells[0] or row
        described[row] = described.get(row, "") + "; " + cells[1]
    board_row = ""
    missing = []
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            board_row = panel["title"]
        elif panel["title"] not in described.get(board_row, ""):
            missing.append(f"{board_row}: {panel['title']}")
    assert missing == [], "docs/operations.md's dashboard table lacks these panels"


def test_version_changes_are_marked_on_every_panel(tmp_path: Path) -> None:
    [mark] = dashboard()["annotations"]["list"]
    assert mark["enable"] and mark["titleFormat"] == "Ollama {{version}}"
    expr = mark["expr"]
    assert metric_names(expr) == {"ollama_tap_upstream_info"} <= reference_metrics()
    assert expr.count('job=~"$job"') == expr.count("{") == 3
    rule = {"record": "dashboard:version_change", "expr": substitute(expr)}
    path = tmp_path / "annotation.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [rule]}]}))
    run(promtool(), "check", "rules", str(path))

"""The compose profile `otel`: the Collector's config parses, its pipelines use only defined
components of the core distribution, and the stack wires ollama-tap → Collector → Jaeger."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.stack import COMPOSE, REPO, compose_cli, compose_config

COLLECTOR = REPO / "deploy" / "otel" / "collector.yaml"
CORE = {
    "receivers": {"otlp"},
    "processors": {"batch", "memory_limiter"},
    "exporters": {"otlp", "otlphttp", "debug"},
}
"""Component types the core image (otel/opentelemetry-collector) ships."""


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COLLECTOR.read_text())
    return loaded


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = tmp_path_factory.mktemp("otel") / ".env"
    env.write_text(
        "OLLAMA_TAP_ADMIN_TOKEN=test-token-0123456789\n"
        "OLLAMA_TAP_OTLP_ENDPOINT=http://otel-collector:4318\n"
    )
    proc = subprocess.run(
        [*compose_cli(), "--profile", "otel", "-f", str(COMPOSE), "--env-file", str(env),
         "config", "--format", "json"],
        capture_output=True, text=True, check=False, timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(env.parent)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    resolved: dict[str, Any] = json.loads(proc.stdout)
    return resolved


def test_pipelines_reference_defined_core_components(collector: dict[str, Any]) -> None:
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "metrics"} <= pipelines.keys()
    for section, types in CORE.items():
        defined = collector[section]
        for name in defined:
            assert name.split("/")[0] in types, f"{section}: {name} is not in the core image"
        for pipeline, spec in pipelines.items():
            for name in spec.get(section, ()):
                assert name in defined, f"pipeline {pipeline} uses undefined {name}"
            assert section == "processors" or spec.get(section), f"{pipeline} has no {section}"
    # Every component defined is used, so none is configured for nothing.
    used = {n for spec in pipelines.values() for names in spec.values() for n in names}
    assert used == {n for section in CORE for n in collector[section]}


def test_the_collector_listens_where_the_proxy_sends(
    collector: dict[str, Any], stack: dict[str, Any]
) -> None:
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"].endswith(":4318")
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    services = stack["services"]
    tap_env = services["ollama-tap"]["environment"]
    assert tap_env["OLLAMA_TAP_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    host = collector["exporters"]["otlp/jaeger"]["endpoint"].split(":")[0]
    assert host in services and "otel" in services[host]["profiles"]


def test_the_profile_adds_the_collector_and_jaeger(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert {"otel-collector", "jaeger"} <= services.keys()
    otelcol = services["otel-collector"]
    assert otelcol["image"].startswith("otel/opentelemetry-collector:")
    mounted = {v["target"]: Path(v["source"]) for v in otelcol["volumes"]}
    assert mounted["/etc/otelcol"] == COLLECTOR.parent
    assert f"--config=/etc/otelcol/{COLLECTOR.name}" in otelcol["command"]
    assert any(p["target"] == 16686 for p in services["jaeger"]["ports"])


def test_without_the_profile_nothing_is_exported(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("OLLAMA_TAP_ADMIN_TOKEN=test-token-0123456789\n")
    proc = compose_config(env, "--format", "json")
    services = json.loads(proc.stdout)["services"]
    assert "otel-collector" not in services and "jaeger" not in services
    assert services["ollama-tap"]["environment"]["OLLAMA_TAP_OTLP_ENDPOINT"] == ""
    assert COMPOSE.exists()

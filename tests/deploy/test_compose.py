"""The compose stack: a real Compose parser accepts it, and it wires the pieces as documented."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.stack import (
    COMPOSE,
    REPO,
    UNPACKS,
    compose_config,
    load_yaml,
    run,
    tool,
)

GPU = REPO / "deploy" / "compose.gpu.yml"
HOST_OLLAMA = REPO / "deploy" / "compose.host-ollama.yml"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"


def resolved(tmp_path: Path, *overrides: Path) -> dict[str, Any]:
    """The stack as Compose resolves it, with the `.env` that `make env` writes."""
    env = tmp_path / ".env"
    env.write_text("OLLAMA_TAP_ADMIN_TOKEN=test-token-0123456789\n")
    proc = compose_config(env, "--format", "json", overrides=overrides)
    assert proc.returncode == 0, proc.stderr
    stack: dict[str, Any] = json.loads(proc.stdout)
    return stack


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved(tmp_path_factory.mktemp("compose"))


def test_compose_refuses_to_start_without_the_token(tmp_path: Path) -> None:
    empty = tmp_path / ".env"
    empty.write_text("")
    proc = compose_config(empty, "--quiet")
    assert proc.returncode != 0
    assert "make env" in proc.stderr


def test_services(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"ollama", "ollama-tap", "prometheus", "alertmanager", "grafana"}
    assert services["ollama"]["image"].startswith("ollama/ollama")


def test_the_proxy_service(config: dict[str, Any]) -> None:
    tap = config["services"]["ollama-tap"]
    assert Path(tap["build"]["context"]) == REPO
    assert tap["build"]["dockerfile"] == "Dockerfile"
    env = tap["environment"]
    assert env["OLLAMA_TAP_UPSTREAM"] == "http://ollama:11434"
    assert env["OLLAMA_TAP_HOST"] == "0.0.0.0"
    assert env["OLLAMA_TAP_ADMIN_TOKEN"] == "test-token-0123456789"
    assert env["OLLAMA_TAP_DB"].startswith("/data/")
    assert any(v["type"] == "volume" and v["target"] == "/data" for v in tap["volumes"])
    assert any(p["target"] == 11435 for p in tap["ports"])
    probe = tap["healthcheck"]["test"]
    assert probe[:2] == ["CMD", "python"], "the slim image has python, not curl"
    assert "http://localhost:11435/_tap/healthz" in probe[-1]


def test_the_postgres_profile_points_the_tap_at_it(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(
        "OLLAMA_TAP_ADMIN_TOKEN=test-token-0123456789\nCOMPOSE_PROFILES=postgres\n"
        "OLLAMA_TAP_PG_PASSWORD=pw-0123\n"
        "OLLAMA_TAP_DB=postgresql://ollama_tap@postgres/ollama_tap\n"
    )
    proc = compose_config(env, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    tap, db = services["ollama-tap"]["environment"], services["postgres"]
    assert tap["OLLAMA_TAP_DB"] == "postgresql://ollama_tap@postgres/ollama_tap"
    assert tap["PGPASSWORD"] == db["environment"]["POSTGRES_PASSWORD"] == "pw-0123"
    assert db["environment"]["POSTGRES_DB"] == "ollama_tap"


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    return {v["target"]: Path(v["source"]) for v in service["volumes"] if v["type"] == "bind"}


def test_prometheus_alertmanager_and_grafana_get_the_repos_files(config: dict[str, Any]) -> None:
    services = config["services"]
    assert mounts(services["prometheus"])["/etc/prometheus"] == REPO / "deploy" / "prometheus"
    assert mounts(services["alertmanager"])["/etc/alertmanager"] == ALERTMANAGER.parent
    grafana = mounts(services["grafana"])
    assert grafana["/etc/grafana/provisioning"] == REPO / "grafana" / "provisioning"
    assert grafana["/etc/grafana/dashboards"] == REPO / "grafana" / "dashboards"
    scrape = load_yaml(REPO / "deploy" / "prometheus" / "prometheus.yml")
    targets = scrape["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["ollama-tap:11435"]
    assert scrape["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "alertmanager:9093"
    ]


def test_alertmanager_config() -> None:
    config = load_yaml(ALERTMANAGER)
    names = {r["name"] for r in config["receivers"]}
    assert config["route"]["receiver"] in names
    assert any("webhook_configs" in r for r in config["receivers"])


def test_alertmanager_config_with_amtool() -> None:
    amtool = tool("amtool", UNPACKS)
    run(amtool, "check-config", str(ALERTMANAGER))


def test_the_gpu_override_reserves_every_nvidia_gpu_for_ollama(tmp_path: Path) -> None:
    services = resolved(tmp_path, GPU)["services"]
    [device] = services["ollama"]["deploy"]["resources"]["reservations"]["devices"]
    assert (device["driver"], device["capabilities"]) == ("nvidia", ["gpu"])
    assert device["count"] in (-1, "all"), "every GPU"
    assert "deploy" not in resolved(tmp_path)["services"]["ollama"], "CPU unless asked"


def test_the_host_ollama_override_drops_the_bundled_one(tmp_path: Path) -> None:
    services = resolved(tmp_path, HOST_OLLAMA)["services"]
    assert set(services) == {"ollama-tap", "prometheus", "alertmanager", "grafana"}
    tap = services["ollama-tap"]
    assert tap["environment"]["OLLAMA_TAP_UPSTREAM"] == "http://host.docker.internal:11434"
    assert tap["extra_hosts"] in (
        ["host.docker.internal=host-gateway"],
        ["host.docker.internal:host-gateway"],
    )
    assert not tap.get("depends_on"), "nothing to wait for"


def test_the_overrides_are_named_where_the_stack_is() -> None:
    text = COMPOSE.read_text()
    assert "-f deploy/compose.gpu.yml" in text and "-f deploy/compose.host-ollama.yml" in text
    for override in (GPU, HOST_OLLAMA):
        assert f"-f deploy/{override.name} up" in override.read_text()
        assert override.name in (REPO / "docs" / "operations.md").read_text()

"""The export's configuration: off unless an endpoint is set, the standard variables, the
protocols, and the SDK imported only when the export is on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ollama_tap.config import ConfigError, Settings
from ollama_tap.otel.config import GRPC, HTTP, Semconv, otel_config
from tests.conftest import ROOT


def settings(**values: object) -> Settings:
    return Settings.model_validate({"upstream": "http://127.0.0.1:11434", **values})


def test_off_unless_an_endpoint_is_set() -> None:
    assert otel_config(settings(), {}) is None
    assert otel_config(settings(), {"OTEL_SERVICE_NAME": "x"}) is None
    for env in (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
    ):
        config = otel_config(settings(), env)
        assert config is not None and config.endpoint is None  # the SDK reads the variable
    config = otel_config(settings(otlp_endpoint="http://c:4318/"), {})
    assert config is not None and config.signal_url("traces") == "http://c:4318/v1/traces"
    assert config.signal_url("metrics") == "http://c:4318/v1/metrics"


def test_the_standard_switches_turn_it_off() -> None:
    on = settings(otlp_endpoint="http://c:4318")
    assert otel_config(on, {"OTEL_SDK_DISABLED": "true"}) is None
    assert otel_config(on, {"OTEL_TRACES_EXPORTER": "none"}) is None


def test_protocols() -> None:
    on = settings(otlp_endpoint="http://c:4317")
    assert otel_config(on, {}).protocol == HTTP  # type: ignore[union-attr]
    grpc = otel_config(on, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc is not None and grpc.protocol == GRPC
    assert grpc.signal_url("traces") == "http://c:4317"  # gRPC takes the URL as it is
    traces = otel_config(
        on, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": HTTP}
    )
    assert traces is not None and traces.protocol == HTTP
    with pytest.raises(ConfigError, match="http/protobuf or grpc"):
        otel_config(on, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(ConfigError, match="needs a scheme"):
        otel_config(settings(otlp_endpoint="collector:4318"), {})


def test_content_follows_the_privacy_mode_and_semconv_the_opt_in() -> None:
    base = {"otlp_endpoint": "http://c:4318"}
    assert otel_config(settings(**base, record="full"), {}).content  # type: ignore[union-attr]
    for mode in ("metadata", "off"):
        assert not otel_config(settings(**base, record=mode), {}).content  # type: ignore[union-attr]
    on = settings(**base)
    assert otel_config(on, {}).semconv is Semconv.DEFAULT  # type: ignore[union-attr]
    opted = {"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"}
    assert otel_config(on, opted).semconv is Semconv.LATEST  # type: ignore[union-attr]


def _loaded_after_make_app(env: dict[str, str], db: Path) -> str:
    code = (
        "import sys; from ollama_tap.app import make_app; from ollama_tap.config import Settings; "
        "make_app(Settings(db=sys.argv[1])); "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_sdk_is_imported_only_when_the_export_is_on(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OLLAMA_TAP_"))}
    env["XDG_DATA_HOME"] = str(tmp_path)
    db = tmp_path / "records.db"
    assert _loaded_after_make_app(env, db).strip() == "[]"
    on = _loaded_after_make_app({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, db)
    assert "opentelemetry.sdk.trace" in on

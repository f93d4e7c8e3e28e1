"""Settings: upstream resolution by Ollama's rules, refusal to loop, the CLI's flags."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from yarl import URL

from ollama_tap.cli import build_parser, main
from ollama_tap.config import ConfigError, RecordMode, Settings, parse_ollama_host, resolve_upstream


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        (":11500", "http://127.0.0.1:11500"),
        ("[::]:11434", "http://127.0.0.1:11434"),
        ("gpu-box", "http://gpu-box:11434"),
        ("gpu-box:9000", "http://gpu-box:9000"),
        ("http://gpu-box", "http://gpu-box:80"),
        ("https://gpu-box", "https://gpu-box:443"),
        ("https://gpu-box:8443/ollama", "https://gpu-box:8443/ollama"),
        ("ollama.com", "https://ollama.com:443"),
        ('  "10.0.0.5:11434"  ', "http://10.0.0.5:11434"),
        ("[fe80::1]:11434", "http://[fe80::1]:11434"),
        ("gpu-box:notaport", "http://gpu-box:11434"),
    ],
)
def test_ollama_host_parsing_follows_ollama(value: str, expected: str) -> None:
    got, want = resolve_upstream(None, value), URL(expected)
    assert (got.scheme, got.host, got.port, got.path) == (
        want.scheme,
        want.host,
        want.port,
        want.path,
    )


def test_precedence_explicit_then_ollama_host_then_default() -> None:
    assert str(resolve_upstream("http://a:1", "b:2")) == "http://a:1"
    assert str(resolve_upstream(None, "b:2")) == "http://b:2"
    assert str(resolve_upstream(None, None)) == "http://127.0.0.1:11434"


def test_env_ollama_host_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "gpu-box:11434")
    assert str(Settings().upstream_url) == "http://gpu-box:11434"
    monkeypatch.setenv("OLLAMA_TAP_UPSTREAM", "http://other:1")
    assert str(Settings().upstream_url) == "http://other:1"


@pytest.mark.parametrize("ollama_host", ["127.0.0.1:11435", "localhost:11435", "0.0.0.0:11435"])
def test_refuses_to_forward_to_itself(monkeypatch: pytest.MonkeyPatch, ollama_host: str) -> None:
    monkeypatch.setenv("OLLAMA_HOST", ollama_host)
    with pytest.raises(ConfigError, match="would forward to itself"):
        Settings().check()


def test_serve_refuses_self_loop_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:11435")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "would forward to itself" in err and "OLLAMA_TAP_UPSTREAM" in err


def test_bad_values_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "99999"]) == 2
    assert "--port" in capsys.readouterr().err
    assert main(["serve", "--record", "everything"]) == 2
    assert "--record" in capsys.readouterr().err


def test_admin_token_none_only_on_loopback() -> None:
    Settings(admin_token="none").check()
    with pytest.raises(ConfigError, match="loopback"):
        Settings(admin_token="none", host="0.0.0.0").check()


def test_record_mode_defaults_by_bind() -> None:
    assert Settings().record_mode is RecordMode.FULL
    assert Settings(host="0.0.0.0").record_mode is RecordMode.METADATA
    assert Settings(host="0.0.0.0", record="full").record_mode is RecordMode.FULL


def test_help_shows_every_setting_with_its_default() -> None:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = serve.format_help()
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        assert str(extra.get("flag", "--" + name.replace("_", "-"))) in text
    assert "11435" in text and "OLLAMA_TAP_PORT" in text


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(nonsense=1)  # type: ignore[call-arg]


def test_parse_rejects_unknown_scheme() -> None:
    with pytest.raises(ConfigError):
        parse_ollama_host("ftp://x")


@pytest.mark.parametrize(
    ("upstream", "says"),
    [
        # Ollama has no login, and its own clients read no user part in OLLAMA_HOST.
        ("http://tap:s3cret@gpu-box:11434", "has a user name or password"),
        ("http://gpu box:11434", "is not a host and port"),
        ("http://[::1:11434", "opens '[' without closing it"),
    ],
)
def test_an_unusable_upstream_is_a_config_error_that_names_the_fix(
    upstream: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as raised:
        parse_ollama_host(upstream)
    assert "s3cret" not in str(raised.value)


def test_start_up_failures_are_one_line_not_a_traceback(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    db_dir = Path(str(tmp_path)) / "ro"
    db_dir.mkdir()
    (db_dir / "admin-token").write_text("")
    (db_dir / "admin-token").chmod(0o600)  # private, as it must be: empty is the failure here
    assert main(["serve", "--port", "0", "--db", str(db_dir / "records.db")]) == 2
    err = capsys.readouterr().err
    assert "admin-token is empty" in err and "Traceback" not in err

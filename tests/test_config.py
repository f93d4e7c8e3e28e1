"""Settings: upstream resolution by Ollama's rules, refusal to loop, the CLI's flags."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from yarl import URL

from ollama_tap.cli import build_parser, main
from ollama_tap.config import ConfigError, RecordMode, Settings, parse_ollama_host, resolve_upstream
from ollama_tap.recorder.store import parse_time
from tests.support.serve_process import ADMIN_TOKEN, free_port


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


@pytest.mark.parametrize(
    ("upstream", "fix"),
    [
        ("http://127.0.0.1:11434/api", "http://127.0.0.1:11434"),
        ("127.0.0.1:11434/api/", "http://127.0.0.1:11434"),
        ("http://gpu-box:11434/v1", "http://gpu-box:11434"),
        ("https://gw/ollama/api/chat", "https://gw/ollama"),
    ],
)
def test_an_upstream_naming_an_api_path_is_refused_with_its_base(upstream: str, fix: str) -> None:
    with pytest.raises(ConfigError, match="names an API path") as raised:
        parse_ollama_host(upstream)
    assert str(raised.value).endswith(f"give Ollama's base URL, e.g. {fix}")


def test_serve_refuses_an_api_path_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "0", "--upstream", "http://127.0.0.1:11434/api"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("ollama-tap: upstream 'http://127.0.0.1:11434/api' names an API path")


def test_since_takes_a_time_ago() -> None:
    assert parse_time("30m", now=10_000.0) == 8_200.0
    assert parse_time("1h", now=10_000.0) == 6_400.0
    assert parse_time("2d", now=200_000.0) == 27_200.0
    assert parse_time("90s", now=100.0) == 10.0
    args = build_parser().parse_args(["records", "list", "--since", "1h"])
    assert abs(args.since - (time.time() - 3600)) < 60
    with pytest.raises(ValueError, match=r"give a time ago \(30m, 1h, 2d\)"):
        parse_time("1 fortnight")


def test_version_says_the_version_and_the_build() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ollama_tap", "--version"], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"ollama-tap \S+ \((compiled|interpreted) build, Python \d+\.\d+\.\d+\)\n", done.stdout
    )


def _serve_default_db(home: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_TAP_", "OLLAMA_HOST"))}
    env |= {"XDG_DATA_HOME": str(home), "OLLAMA_TAP_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.Popen(
        [sys.executable, "-m", "ollama_tap", "serve", "--port", str(port),
         "--upstream", "http://127.0.0.1:9"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_second_tap_on_the_host_is_refused_the_default_database(tmp_path: Path) -> None:
    first_port, second_port = free_port(), free_port()
    first = _serve_default_db(tmp_path, first_port)
    try:
        assert first.stderr is not None
        for line in first.stderr:  # the banner comes once the port is bound
            if "recording:" in line:
                break
        second = _serve_default_db(tmp_path, second_port)
        try:
            _, err = second.communicate(timeout=60)
        finally:
            if second.returncode is None:  # it started: the claim did not hold
                second.kill()
                second.wait(timeout=60)
    finally:
        first.terminate()
        first.wait(timeout=60)
    db = tmp_path / "ollama-tap" / "records.db"
    assert second.returncode == 2
    [line] = err.splitlines()
    holder = f"the tap on port {first_port} (pid {first.pid})"
    assert line.startswith(
        f"ollama-tap: the default database {db} is in use by {holder}; give this tap its own: --db "
    )
    assert f"records-{second_port}.db --instance " in line

"""--db as a file or a PostgreSQL URL, --instance, and the URL as printed (no password)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ollama_tap.config import Settings
from ollama_tap.credentials import redacted_url
from ollama_tap.serve import banner


def test_db_is_a_file_or_a_postgres_url(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(db="records.db").db_location == Path("records.db")
    url = "postgresql://tap@db.internal/tap"
    assert Settings(db=url).db_location == url
    monkeypatch.setenv("OLLAMA_TAP_DB", "postgres://tap@db/tap")
    settings = Settings()
    assert settings.db_location == "postgres://tap@db/tap"
    # The admin token is still kept on disk, where the default database would be.
    assert settings.db_path.name == "records.db"


def test_the_instance_defaults_to_the_host_name() -> None:
    assert Settings().instance_name == socket.gethostname()
    assert Settings(instance="gpu-box-2").instance_name == "gpu-box-2"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://tap:s3cret@db:5432/tap", "postgresql://tap@db:5432/tap"),
        ("postgresql://tap:p%40ss@db/tap?sslmode=require", "postgresql://tap@db/tap?sslmode=require"),
        ("postgresql://db/tap?password=s3cret&user=tap", "postgresql://db/tap?password=[redacted]&user=tap"),
        ("postgresql://tap@db/tap", "postgresql://tap@db/tap"),
        ("postgresql://a:b@h1:5432,h2:5433/tap", "postgresql://a@h1:5432,h2:5433/tap"),
    ],
)  # fmt: skip
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_the_banner_shows_the_database_without_the_password() -> None:
    settings = Settings(db="postgresql://tap:pw-SECRET@db/tap", instance="box-1")
    text = banner(settings, None)
    assert "recording: full -> postgresql://tap@db/tap as box-1" in text
    assert "pw-SECRET" not in text

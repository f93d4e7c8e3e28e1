"""A malformed PostgreSQL URL is one line without its password, in every command that takes
--db; secrets given as flags are said to show in `ps`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PASSWORD = "PgS3cretPassw0rd"
URLS = [
    f"postgresql://tap:{PASSWORD}@[::1/tap",
    f"postgresql://tap:{PASSWORD}@[::1]x/tap",
    f"postgresql://tap:{PASSWORD}@[]/tap",
    f"postgresql://tap:{PASSWORD}@h/tap?foo=bar",
    f"postgresql://tap%zz:{PASSWORD}@h/tap",
    f"postgresql://tap:{PASSWORD}@h:notaport/tap",
    f"postgresql://tap:{PASSWORD}@h/tap?sslmode=bogus",
]
COMMANDS = [
    ["serve", "--port", "0"],
    ["records", "list"],
    ["records", "show", "abc"],
    ["replay", "send", "--to", "http://127.0.0.1:9"],
    ["replay", "serve", "--port", "0"],
]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_TAP_")}
    return subprocess.run(
        [sys.executable, "-m", "ollama_tap", *argv],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_malformed_url_is_one_line_without_its_password(command: list[str]) -> None:
    # Every shape through `serve`; the review's three through the others (one parser).
    for url in URLS if command[0] == "serve" else URLS[:3]:
        done = _run(*command, "--db", url)
        said = done.stderr
        assert done.returncode != 0, (url, said)
        assert PASSWORD not in said and PASSWORD not in done.stdout, (url, said)
        assert "Traceback" not in said and said.count("\n") <= 2, (url, said)  # `ps` warning
        assert "postgresql://" in said, (url, said)


def test_secrets_given_as_flags_are_said_to_show_in_ps() -> None:
    done = _run(
        "serve", "--port", "0", "--admin-token", "sekrit-token-0123456789",
        "--db", f"postgresql://tap:{PASSWORD}@h:notaport/tap",
    )  # fmt: skip
    assert done.returncode == 2
    assert "--admin-token (use OLLAMA_TAP_ADMIN_TOKEN" in done.stderr
    assert "the password in --db (use PGPASSWORD" in done.stderr
    assert "sekrit" not in done.stderr and PASSWORD not in done.stderr

"""What a --db names (a SQLite file or a PostgreSQL URL), and a postgresql:// one checked
before anything connects, its password never repeated.

libpq quotes the whole URI, password included, in its parse errors, and those ended up in
tracebacks and warnings. The URL is parsed here, with psycopg's own parser, when the
settings are made; what it says is repeated with the URL's printable form in place of the
URL, and values libpq would only refuse at connect time (the port, sslmode) are checked too,
so a URL that cannot work fails at start rather than in every retry.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from ollama_tap.credentials import redacted_url

SSLMODES: Final = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})
_PASSWORD: Final = re.compile(r"://[^/@:]*:([^@]*)@")


def is_postgres_url(location: object) -> bool:
    """Whether a --db value names a PostgreSQL database rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def location(value: Path | str) -> Path | str:
    """A --db as the recorder takes it: a checked PostgreSQL URL (text), else a file path.
    ValueError (its message without the password) for what can be neither: another
    database's URL (`mysql://…`, which was taken for a relative path) or nothing."""
    if is_postgres_url(value):
        wrong = problem(str(value))
        if wrong is not None:
            raise ValueError(f"{wrong}; the form is postgresql://user@host:5432/db")
        return value
    if isinstance(value, str) and ("://" in value or not value.strip()):
        shown = redacted_url(value) if value.strip() else "empty"
        raise ValueError(
            f"{shown!r} is neither a file path nor a postgresql:// URL; give a SQLite "
            "file (e.g. ~/.local/share/ollama-tap/records.db) or postgresql://user@host/db"
        )
    return Path(value)


def problem(url: str) -> str | None:
    """What is wrong with `url`, fit to print (no password), or None. Without psycopg
    installed nothing is checked here: the store says that it is needed."""
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    shown = redacted_url(url)
    try:
        params = conninfo_to_dict(url)
    except ProgrammingError as exc:
        reason = " ".join(hidden(str(exc), url).split())  # libpq's text ends in a newline
        return f"{shown!r} does not parse ({reason})"
    ports = str(params.get("port", "5432")).split(",")
    if not all(p.isdigit() and 0 < int(p) < 65536 for p in ports):
        return f"{shown!r} has the port {params['port']!r}; give a number, e.g. :5432"
    if params.get("sslmode", "prefer") not in SSLMODES:
        return (
            f"{shown!r} has sslmode={params['sslmode']!r}; use one of {', '.join(sorted(SSLMODES))}"
        )
    return None


def hidden(message: str, url: str) -> str:
    """`message` with `url` in it replaced by its printable form, and its password by ***."""
    message = message.replace(url, redacted_url(url))
    found = _PASSWORD.search(url)
    if found and found.group(1):
        message = message.replace(found.group(1), "***")
    return message

"""Which names carry credentials, and the query strings and paths with their values redacted.

One rule for every name the proxy keeps or prints: query parameters, path parameters
(`/api/generate;token=…`) and the keys of recorded JSON bodies. A harmless name caught by
it loses only its value in the record; a credential missed would be stored.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final
from urllib.parse import unquote_plus

REDACTED: Final = "[redacted]"
_CREDENTIAL: Final = re.compile(
    r"key|token|secret|pass|pwd|auth|credential|session|cookie|jwt|bearer"
    r"|(?:^|[^a-z])sig|^code$"
)
"""Any name containing one of the words (`api_key`, `x-goog-api-key`, `refresh_token`,
`client_secret`, `password`, `passwd`, `jwt`, `bearer`, ...), `sig` at the start of a word
(`sig` for Azure, `X-Amz-Signature`), or exactly `code` (OAuth)."""


@lru_cache(maxsize=4096)
def is_credential_name(name: str) -> bool:
    """Whether a parameter or key of this name may hold a credential (percent-decoding and
    case do not matter). Cached: bodies repeat the same few keys."""
    return _CREDENTIAL.search(unquote_plus(name).lower()) is not None


def is_credential_key(key: str) -> bool:
    """Whether a recorded JSON body's key may hold a credential: the same rule, but for
    `code`, which in a body is far more often a tool's argument (a coding agent's source
    text) than an OAuth code, and losing it would empty the records worth reading."""
    return key != "code" and is_credential_name(key)


def _redacted_pieces(pieces: list[str], every: bool) -> str:
    """`name=value` pieces joined by `;`, a value redacted when its name is a credential's
    (or `every` value)."""
    out = []
    for piece in pieces:
        name, eq, _ = piece.partition("=")
        out.append(f"{name}={REDACTED}" if eq and (every or is_credential_name(name)) else piece)
    return ";".join(out)


def redacted_query(query: str) -> str:
    """The query string with the values of credential parameters replaced.

    Servers disagree on `;`: some split pairs at it, others (Python's parse_qs, aiohttp)
    read `api_key;x=v` as one name `api_key;x`, and Go drops such pairs. A value is
    redacted when any of these readings names a credential."""
    if not query:
        return query
    pairs = []
    for pair in query.split("&"):
        whole = is_credential_name(pair.partition("=")[0])
        pairs.append(_redacted_pieces(pair.split(";"), whole))
    return "&".join(pairs)


_JSON_PAIR: Final = re.compile(
    r'"((?:[^"\\]|\\.){1,256})"(\s*:\s*)("(?:[^"\\]|\\.)*"|[^\s,}\]{\["][^\s,}\]]*)'
)
"""A `"name": value` pair in text that looks like JSON (a string value, or a bare one)."""
_FORM_PAIR: Final = re.compile(r"(?:^|(?<=[&;\s?]))([^\s=&;\"{}]{1,256})=([^&;\s]*)")
"""A `name=value` pair of a form body or a query string in free text."""


def redacted_text(text: str) -> str:
    """A request body that did not parse as JSON (a trailing comma, a form body, text),
    with the values of credential-named pairs replaced, JSON-looking or `name=value`: such
    a body is stored as text, and its credentials must not be."""

    def json_pair(m: re.Match[str]) -> str:
        if not is_credential_key(m.group(1)):
            return m.group(0)
        return f'"{m.group(1)}"{m.group(2)}"{REDACTED}"'

    def form_pair(m: re.Match[str]) -> str:
        return f"{m.group(1)}={REDACTED}" if is_credential_name(m.group(1)) else m.group(0)

    return _FORM_PAIR.sub(form_pair, _JSON_PAIR.sub(json_pair, text))


def redacted_path(path: str) -> str:
    """The path with the values of credential path parameters (`/x;token=v/y`) replaced."""
    if ";" not in path:
        return path
    segments = []
    for segment in path.split("/"):
        head, *params = segment.split(";")
        segments.append(";".join([head, _redacted_pieces(params, False)]) if params else head)
    return "/".join(segments)


def redacted_url(url: str) -> str:
    """A URL fit to print: no password in its user part, no credential in its query
    (`postgresql://tap:secret@db/tap?sslpassword=x` → `postgresql://tap@db/tap?sslpassword=…`)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, mark, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at:
        authority = f"{userinfo.partition(':')[0]}@{hosts}"
    return f"{scheme}://{authority}{slash}{path}{mark}{redacted_query(query)}"

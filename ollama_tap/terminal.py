"""Recorded text printed to a terminal.

Prompts and model output are other people's text (a prompt injection can make a model emit
anything): printed as they are, escape sequences in them would run in the operator's
terminal — set its title, write its clipboard (OSC 52), hide or forge lines. On a terminal
they are shown as visible escapes instead; piped or redirected, the text stays exact.
"""

from __future__ import annotations

import re
import sys
from typing import Final, TextIO

_UNSAFE: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str) -> str:
    """`text` with every unsafe character shown as an escape."""
    return _UNSAFE.sub(_escape, text)


def printable(text: str, stream: TextIO | None = None) -> str:
    """`text` as it may be written to `stream` (standard output by default)."""
    out = sys.stdout if stream is None else stream
    return escaped(text) if out.isatty() else text


def plural(count: int, noun: str) -> str:
    """`1 record`, `2 records`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"

"""Recorded text on a terminal: escape sequences shown, never run (ollama_tap/terminal.py)."""

from __future__ import annotations

import io

import pytest

from ollama_tap.terminal import escaped, printable

OUTPUT = "ok\x1b]52;c;cGF5bG9hZA==\x07\x1b[2J\u202edone\x9b\tand\nmore"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_control_characters_and_bidi_overrides_are_shown_as_escapes() -> None:
    assert escaped(OUTPUT) == "ok\\x1b]52;c;cGF5bG9hZA==\\x07\\x1b[2J\\u202edone\\x9b\tand\nmore"


def test_only_a_terminal_gets_the_escapes() -> None:
    assert printable(OUTPUT, Tty()) == escaped(OUTPUT)
    assert printable(OUTPUT, io.StringIO()) == OUTPUT  # piped or redirected: exact


def test_token_pieces_are_escaped_even_piped(capsys: pytest.CaptureFixture[str]) -> None:
    # `decode --tokens` prints a table of pieces: a byte-fallback <0x1B> piece is an ESC.
    from ollama_tap.cli.decode import _print_pieces
    from ollama_tap.tokens.detok import Piece

    _print_pieces([Piece(7, "\x1b[31mred\n", "byte")])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31mred\\n" in out

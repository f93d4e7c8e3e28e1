"""A mistyped command or flag gets argparse's error with the nearest right spelling."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence


def check(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Walk `argv` down the command tree; at the first unknown command or `--flag` with a
    close match, exit through that (sub)command's parser error naming it. Anything else is
    left to argparse, which parses the same arguments next."""
    flags = _flags(parser)
    for position, token in enumerate(argv):
        if token == "--":
            return
        if token.startswith("--"):
            name = token.partition("=")[0]
            if not any(flag.startswith(name) for flag in flags):
                _suggest(parser, f"unrecognized argument {name}", name, flags)
            continue
        commands = _commands(parser)
        if commands is None or token.startswith("-") or _takes_value(parser, argv, position):
            continue
        if token not in commands:
            _suggest(parser, f"invalid choice: {token!r}", token, list(commands))
            return
        parser = commands[token]
        flags = [*flags, *_flags(parser)]


def _suggest(parser: argparse.ArgumentParser, problem: str, given: str, known: list[str]) -> None:
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    if close:
        parser.error(f"{problem}; did you mean {close[0]}?")


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices
    return None


def _takes_value(parser: argparse.ArgumentParser, argv: Sequence[str], position: int) -> bool:
    """Whether the token at `position` is the value of the flag before it (`--db X`)."""
    if position == 0 or not argv[position - 1].startswith("-") or "=" in argv[position - 1]:
        return False
    before = argv[position - 1]
    for action in parser._actions:
        if before in action.option_strings:
            return action.nargs != 0
    return False

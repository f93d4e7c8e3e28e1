"""Token ids back to text for `gpt2` (byte-level BPE) and `llama` (SentencePiece) vocabularies."""

# Token kinds follow llama.cpp's `llama_vocab::token_to_piece`: control and unknown tokens
# are "special" (their own text, or nothing when hidden), user-defined tokens are copied
# as-is, unused tokens print nothing, byte tokens print their byte in SentencePiece
# vocabularies and nothing in BPE ones. A gpt2 character outside the byte map (never seen
# in real vocabularies) keeps its own UTF-8 bytes instead of llama.cpp's "[UNK_BYTE_...]".

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ollama_tap.tokens.errors import DecodeError, UnsupportedTokenizer

SUPPORTED: Final = ("gpt2", "llama")
_SPM_SPACE: Final = "▁"
_BYTE_TOKEN: Final = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class Kind(enum.IntEnum):
    """GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


_SPECIAL: Final = frozenset({Kind.UNKNOWN, Kind.CONTROL})


@dataclass(frozen=True, slots=True)
class Piece:
    """One token of a per-token view."""

    id: int
    text: str
    """The token's own bytes as text; a partial UTF-8 sequence shows as `\\xNN` escapes."""
    kind: str
    """normal, unknown, control, user-defined, unused, byte or undefined."""


def _gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest
    to code points from 256 up, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


_GPT2_BYTES: Final = _gpt2_byte_decoder()


def _gpt2_normal(text: str) -> bytes:
    table = _GPT2_BYTES
    if all(c in table for c in text):
        return bytes([table[c] for c in text])
    return b"".join(bytes([table[c]]) if c in table else c.encode() for c in text)


def _spm_normal(text: str) -> bytes:
    return text.replace(_SPM_SPACE, " ").encode()


def _spm_byte(text: str) -> bytes:
    match = _BYTE_TOKEN.fullmatch(text)
    return bytes([int(match.group(1), 16)]) if match else b""


class Detokenizer:
    """Decodes ids of one vocabulary; per-token bytes are computed once, at construction."""

    def __init__(
        self, model: str, tokens: Sequence[str], types: Sequence[int], add_space_prefix: bool
    ) -> None:
        if model not in SUPPORTED:
            raise UnsupportedTokenizer(f"unsupported tokenizer model '{model}'")
        self.model = model
        self.kinds = [Kind(t) if 0 <= t <= 6 else Kind.UNDEFINED for t in types[: len(tokens)]]
        self.kinds += [Kind.NORMAL] * (len(tokens) - len(self.kinds))
        self.shown = [self._bytes(t, k) for t, k in zip(tokens, self.kinds, strict=True)]
        self.hidden = [
            b"" if k in _SPECIAL else b for b, k in zip(self.shown, self.kinds, strict=True)
        ]
        # SentencePiece encodes a leading "▁" that is not in the text: drop one space.
        self.strip_space = model == "llama" and add_space_prefix

    def _bytes(self, text: str, kind: Kind) -> bytes:
        if kind in _SPECIAL or kind == Kind.USER_DEFINED:
            return text.encode()
        if kind == Kind.NORMAL:
            return _gpt2_normal(text) if self.model == "gpt2" else _spm_normal(text)
        if kind == Kind.BYTE and self.model == "llama":
            return _spm_byte(text)
        return b""

    def _check(self, ids: Sequence[int]) -> None:
        if ids and (min(ids) < 0 or max(ids) >= len(self.shown)):
            bad = next(i for i in ids if not 0 <= i < len(self.shown))
            raise DecodeError(
                f"token id {bad} is outside this vocabulary of {len(self.shown)} tokens "
                f"(valid ids are 0 to {len(self.shown) - 1}); was it made by another model?"
            )

    def decode_bytes(self, ids: Sequence[int], hide_control: bool = False) -> bytes:
        """The raw bytes of the ids, SentencePiece's added leading space removed."""
        self._check(ids)
        table = self.hidden if hide_control else self.shown
        out = b"".join([table[i] for i in ids])
        if self.strip_space and out.startswith(b" "):
            return out[1:]
        return out

    def decode(self, ids: Sequence[int], hide_control: bool = False) -> str:
        """The text of the ids; only genuinely invalid UTF-8 becomes U+FFFD."""
        return self.decode_bytes(ids, hide_control).decode("utf-8", "replace")

    def pieces(self, ids: Sequence[int]) -> list[Piece]:
        """Each id with its own text and kind, as in a per-token table."""
        self._check(ids)
        return [
            Piece(i, self.shown[i].decode("utf-8", "backslashreplace"), self.kinds[i].label)
            for i in ids
        ]

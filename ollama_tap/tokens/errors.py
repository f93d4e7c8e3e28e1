"""The errors of the tokens package; each message is one sentence a user can act on."""

from __future__ import annotations


class TokensError(Exception):
    """Base of every error the tokens package raises on purpose."""


class GGUFError(TokensError):
    """A file that is not a readable GGUF header (wrong magic, truncated, absurd sizes)."""


class StoreError(TokensError):
    """The Ollama model store is missing, lacks a model, or holds a damaged blob."""


class VocabError(TokensError):
    """No vocabulary could be loaded for a model (missing keys, Ollama unreachable...)."""


class UnsupportedTokenizer(VocabError):
    """A tokenizer model this package cannot decode faithfully (bert, t5, rwkv...)."""


class DecodeError(TokensError, ValueError):
    """Token ids that do not belong to the vocabulary."""

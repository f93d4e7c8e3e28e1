"""A recorded exchange's `context` decoded with the vocabulary it was recorded with, or why not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from ollama_tap.tokens.detok import Piece
from ollama_tap.tokens.errors import DecodeError, TokensError, UnsupportedTokenizer
from ollama_tap.tokens.vocab import Vocab

GENERATE: Final = "/api/generate"
LoadVocab = Callable[[str, str | None], Awaitable[Vocab]]
"""Loads the vocabulary of (model name, digest or None): `VocabCache.get`, `VocabSource.load`."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a record has no decoded context: a stable `reason` code and one sentence."""

    reason: str
    """route, raw, privacy, no_context, no_vocabulary, unsupported_tokenizer, wrong_vocabulary."""
    message: str


def token_docs(pieces: Sequence[Piece]) -> list[dict[str, Any]]:
    """The per-token view as JSON objects: id, text, kind."""
    return [asdict(p) for p in pieces]


def _sent_raw(record: Mapping[str, Any]) -> bool:
    body = ((record.get("request") or {}).get("body") or {}).get("json")
    return isinstance(body, dict) and body.get("raw") is True


def context_ids(record: Mapping[str, Any]) -> list[int] | Unavailable:
    """The context ids a record kept, or why it has none."""
    endpoint = record.get("endpoint")
    if endpoint != GENERATE:
        return Unavailable(
            "route",
            f"{endpoint or 'this route'} replies carry no context: only non-raw /api/generate "
            "replies do (a field Ollama has deprecated)",
        )
    ids = record.get("context")
    if isinstance(ids, list):
        return ids
    count = record.get("context_len")
    if record.get("mode") == "metadata" and count is not None:
        return Unavailable(
            "privacy",
            f"the metadata privacy mode keeps only the number of context ids ({count}), not "
            "the ids; record with --record full to keep them",
        )
    if _sent_raw(record):
        return Unavailable("raw", "raw-mode /api/generate replies carry no context")
    return Unavailable(
        "no_context",
        f"the reply carried no context (outcome {record.get('outcome')}): it was raw, "
        "failed, or only loaded the model",
    )


def _decoded(vocab: Vocab, ids: list[int], tokens: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"text": vocab.decode(ids)}
    if tokens:
        doc["tokens"] = token_docs(vocab.pieces(ids))
    return doc


async def _attempt(
    record: Mapping[str, Any], ids: list[int], load: LoadVocab | None, tokens: bool
) -> dict[str, Any] | Unavailable:
    model = record.get("model")
    if not model:
        return Unavailable("no_vocabulary", "the record names no model")
    if load is None:
        return Unavailable("no_vocabulary", "no vocabulary source is configured")
    try:
        vocab = await load(model, record.get("model_digest"))
        # Decoding 128k ids takes tens of ms and their per-token view hundreds: off the loop.
        return {"vocabulary": vocab.source, **await asyncio.to_thread(_decoded, vocab, ids, tokens)}
    except UnsupportedTokenizer as exc:
        return Unavailable("unsupported_tokenizer", str(exc))
    except DecodeError as exc:
        return Unavailable("wrong_vocabulary", str(exc))
    except TokensError as exc:
        return Unavailable("no_vocabulary", str(exc))


async def decode_record(
    record: Mapping[str, Any], load: LoadVocab | None, tokens: bool = False
) -> dict[str, Any]:
    """The `decoded_context` of a record, the same document in the API and the CLI:

    - ``ids_count``: how many ids the reply's context had (also in metadata mode), or null;
    - ``model``, ``digest``: the model and digest the record was made with, whose vocabulary
      decodes it (a null digest, unknown when recorded, means the name's current vocabulary);
    - ``vocabulary``: where that vocabulary was read (a blob path or an /api/show URL);
    - ``text``: the decoded text, control tokens shown as their own text, or null;
    - ``tokens``: only when asked, one ``{"id", "text", "kind"}`` per id;
    - ``reason`` and ``unavailable``: null when decoded, else a code (see `Unavailable`) and
      the sentence that explains it.
    """
    doc: dict[str, Any] = {
        "ids_count": record.get("context_len"),
        "model": record.get("model"),
        "digest": record.get("model_digest"),
        "vocabulary": None,
        "text": None,
        "reason": None,
        "unavailable": None,
    }
    found = context_ids(record)
    outcome = (
        found if isinstance(found, Unavailable) else await _attempt(record, found, load, tokens)
    )
    if isinstance(outcome, Unavailable):
        doc.update(reason=outcome.reason, unavailable=outcome.message)
    else:
        doc.update(outcome)
    return doc

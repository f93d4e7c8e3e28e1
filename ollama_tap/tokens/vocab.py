"""A model's vocabulary: from GGUF metadata or /api/show, found locally or upstream, cached."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
import orjson
from yarl import URL

from ollama_tap.ollama.names import model_key
from ollama_tap.tokens.detok import Detokenizer, Piece
from ollama_tap.tokens.errors import GGUFError, StoreError, UnsupportedTokenizer, VocabError
from ollama_tap.tokens.gguf import read_metadata
from ollama_tap.tokens.store import ModelStore, digest_hex

_MODEL = "tokenizer.ggml.model"
_TOKENS = "tokenizer.ggml.tokens"
_TYPES = "tokenizer.ggml.token_type"


@dataclass(frozen=True)
class Vocab:
    """A tokenizer vocabulary; decoding tables are built once, when it is made."""

    model: str
    """`tokenizer.ggml.model`: gpt2, llama, bert, t5..."""
    tokens: Sequence[str]
    token_types: Sequence[int]
    source: str
    """Where it was read (a file path or an /api/show URL), for messages."""
    add_space_prefix: bool = True
    detokenizer: Detokenizer | None = field(default=None, repr=False, compare=False)
    """None when the tokenizer model is unsupported."""

    @classmethod
    def from_kv(cls, kv: Mapping[str, object], source: str) -> Vocab:
        """From GGUF metadata or /api/show `model_info` (the same keys)."""
        model, tokens = kv.get(_MODEL), kv.get(_TOKENS)
        types = kv.get(_TYPES) or []
        if not isinstance(model, str) or not isinstance(tokens, list) or not tokens:
            raise VocabError(f"{source} has no vocabulary ({_MODEL} and {_TOKENS} are missing)")
        if not (
            isinstance(types, list)
            and all(isinstance(t, str) for t in tokens)
            and all(isinstance(t, int) for t in types)
        ):
            raise VocabError(f"{source} has a malformed vocabulary ({_TOKENS}, {_TYPES})")
        space = kv.get("tokenizer.ggml.add_space_prefix", True)
        try:
            detok = Detokenizer(model, tokens, types, bool(space))
        except UnsupportedTokenizer:
            detok = None
        return cls(model, tokens, types, source, bool(space), detok)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> Vocab:
        return cls.from_kv(read_metadata(path).kv, str(path))

    @classmethod
    def from_show(cls, body: bytes, source: str) -> Vocab:
        """From the body of an /api/show reply made with `"verbose": true`."""
        try:
            info = orjson.loads(body).get("model_info")
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise VocabError(f"{source} did not return a JSON object") from exc
        if not isinstance(info, dict):
            raise VocabError(f"{source} returned no model_info")
        if _MODEL in info and info.get(_TOKENS) is None:
            raise VocabError(f"{source} elided the token arrays; it must be asked with verbose")
        return cls.from_kv(info, source)

    def _detok(self) -> Detokenizer:
        if self.detokenizer is None:
            raise UnsupportedTokenizer(f"unsupported tokenizer model '{self.model}'")
        return self.detokenizer

    def decode(self, ids: Sequence[int], hide_control: bool = False) -> str:
        """The text of `ids`; control tokens print as their own text unless hidden."""
        return self._detok().decode(ids, hide_control)

    def pieces(self, ids: Sequence[int]) -> list[Piece]:
        """One (id, text, kind) per id."""
        return self._detok().pieces(ids)


def load_local(store: ModelStore, model: str, digest: str | None = None) -> Vocab | None:
    """The vocabulary from the store's GGUF blob of `model` at `digest`; None if absent.
    Blocking: call it in a thread."""
    manifest = store.find(model, digest)
    if manifest is None:
        return None
    return Vocab.from_gguf(store.blob_path(manifest.model_layer.digest))


def _unreachable(upstream: URL, model: str, exc: Exception) -> VocabError:
    return VocabError(f"cannot reach Ollama at {upstream} for the vocabulary of "
                      f"'{model}' ({exc}); start it or pass --url")  # fmt: skip


async def check_digest(
    session: aiohttp.ClientSession, upstream: URL, model: str, digest: str
) -> None:
    """Refuse a model whose name the upstream now gives to another version than `digest`:
    /api/show answers by name, and its vocabulary would be filed under the wrong digest."""
    try:
        async with session.get(upstream / "api" / "tags") as resp:
            body = await resp.read() if resp.status == 200 else b"{}"
        models = orjson.loads(body).get("models") or []
    except (aiohttp.ClientError, orjson.JSONDecodeError, AttributeError) as exc:
        raise _unreachable(upstream, model, exc) from exc
    wanted = model_key(model)
    named = (m for m in models if isinstance(m, dict) and model_key(str(m.get("name"))) == wanted)
    now = next((str(m.get("digest")) for m in named), None)
    if now is not None and digest_hex(now) != digest_hex(digest):
        raise VocabError(
            f"Ollama at {upstream} now has another version of '{model}' "
            f"(sha256:{digest_hex(now)[:12]}, not sha256:{digest_hex(digest)[:12]}) and "
            "that version is not in the local store; its vocabulary is not available"
        )


async def fetch_show(session: aiohttp.ClientSession, upstream: URL, model: str) -> Vocab:
    """The vocabulary from Ollama's `/api/show` with `"verbose": true`."""
    url = upstream / "api" / "show"
    try:
        async with session.post(url, json={"model": model, "verbose": True}) as resp:
            body = await resp.read()
            status = resp.status
    except aiohttp.ClientError as exc:
        raise _unreachable(upstream, model, exc) from exc
    if status == 404:
        raise VocabError(f"Ollama at {upstream} has no model '{model}'; pull it first")
    if status != 200:
        raise VocabError(f"Ollama at {upstream} answered /api/show for '{model}' with {status}")
    # Parsing a multi-MB reply and building the tables would stall the event loop.
    return await asyncio.to_thread(Vocab.from_show, body, str(url))


class VocabSource:
    """Vocabularies from the local store when it is on this disk, else from the upstream."""

    def __init__(
        self,
        session: aiohttp.ClientSession | None,
        upstream: URL | None,
        store: ModelStore | None,
    ) -> None:
        self.session, self.upstream, self.store = session, upstream, store

    async def load(self, model: str, digest: str | None = None) -> Vocab:
        if self.store is not None:
            try:
                vocab = await asyncio.to_thread(load_local, self.store, model, digest)
            except (StoreError, GGUFError):
                vocab = None  # a damaged store entry: Ollama itself may still serve it
            if vocab is not None:
                return vocab
        if self.session is None or self.upstream is None:
            where = self.store.root if self.store else "no local store"
            raise VocabError(f"model '{model}' is not in the local store ({where}) "
                             "and no upstream is configured")  # fmt: skip
        if digest is not None:
            await check_digest(self.session, self.upstream, model, digest)
        return await fetch_show(self.session, self.upstream, model)


class VocabCache:
    """Vocabularies by model digest (by name when the digest is unknown), each loaded once,
    even when many requests ask for it at the same time; a failed load is retried later.

    At most `size` are kept, least recently used out first: a 150k-token vocabulary is tens
    of MB, and a long-running proxy meets many model versions.
    """

    def __init__(self, load: Callable[[str, str | None], Awaitable[Vocab]], size: int = 4) -> None:
        self._load = load
        self._size = size
        self._entries: dict[str, asyncio.Task[Vocab]] = {}

    async def get(self, model: str, digest: str | None = None) -> Vocab:
        key = f"sha256:{digest_hex(digest)}" if digest else f"name:{model}"
        task = self._entries.pop(key, None)
        if task is None:
            task = asyncio.ensure_future(self._load(model, digest))
            task.add_done_callback(lambda t: self._forget_failed(key, t))
        self._entries[key] = task  # most recently used last
        while len(self._entries) > self._size:
            del self._entries[next(iter(self._entries))]
        # One caller giving up must not cancel the load the others are waiting for.
        return await asyncio.shield(task)

    def _forget_failed(self, key: str, task: asyncio.Task[Vocab]) -> None:
        if (task.cancelled() or task.exception() is not None) and self._entries.get(key) is task:
            del self._entries[key]

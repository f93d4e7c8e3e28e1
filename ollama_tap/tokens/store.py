"""The local Ollama model store: manifests, blobs, their verification and GGUF facts."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TypeAlias

import orjson

from ollama_tap.ollama.names import DEFAULT_HOST, DEFAULT_NAMESPACE, canonical_model
from ollama_tap.tokens.errors import GGUFError, StoreError
from ollama_tap.tokens.gguf import GGUFMetadata, GGUFValue, read_metadata

MODEL_MEDIA_TYPE: Final = "application/vnd.ollama.image.model"
_HASH_CHUNK: Final = 4 << 20
# llama.cpp's llama_ftype (general.file_type); gaps are retired formats.
_FILE_TYPES: Final = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}  # fmt: skip


def candidate_roots(env: Mapping[str, str]) -> list[Path]:
    """Where Ollama keeps models (envconfig.Models): OLLAMA_MODELS, else the user's
    ~/.ollama/models, else the Linux service's home (install.sh, distribution packages)."""
    if env.get("OLLAMA_MODELS"):
        return [Path(env["OLLAMA_MODELS"]).expanduser()]
    return [
        Path.home() / ".ollama" / "models",
        Path("/usr/share/ollama/.ollama/models"),
        Path("/var/lib/ollama/.ollama/models"),
        Path("/var/lib/ollama"),
    ]


def digest_hex(digest: str) -> str:
    """The hex part of "sha256:…", "sha256-…" or a bare hex digest, lower-cased."""
    return digest.rpartition(":")[2].rpartition("-")[2].lower()


@dataclass(frozen=True)
class Layer:
    """One entry of a manifest: a blob named by its digest."""

    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """A model as the store knows it."""

    name: str
    """Shortest display name, as `ollama list` prints it."""
    path: Path
    digest: str
    """SHA-256 of the manifest file: the `digest` of /api/tags and /api/ps."""
    modified: datetime
    layers: tuple[Layer, ...]
    """The config blob first, then the layers in manifest order."""

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def model_layer(self) -> Layer:
        for layer in self.layers:
            if layer.media_type == MODEL_MEDIA_TYPE:
                return layer
        raise StoreError(f"model {self.name} has no GGUF weights layer ({MODEL_MEDIA_TYPE})")


def _layer(raw: object, where: Path) -> Layer:
    if not isinstance(raw, dict):
        raise StoreError(f"manifest {where} has a layer that is not an object")
    try:
        return Layer(str(raw["mediaType"]), str(raw["digest"]), int(raw["size"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"manifest {where} has a layer without mediaType/digest/size") from exc


def _display_name(parts: tuple[str, ...]) -> str:
    host, namespace, model, tag = parts
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    return f"{model}:{tag}" if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"


class ModelStore:
    """An Ollama models directory (`manifests/` and `blobs/`)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def locate(
        cls, explicit: Path | None = None, env: Mapping[str, str] = os.environ
    ) -> ModelStore:
        """The store at `explicit`, else the first of `candidate_roots` that exists."""
        roots = [explicit] if explicit else candidate_roots(env)
        for root in roots:
            if (root / "manifests").is_dir():
                return cls(root)
        looked = ", ".join(str(r) for r in roots)
        raise StoreError(
            f"no Ollama model store at {looked}; pass --store DIR or set OLLAMA_MODELS"
        )

    @classmethod
    def on_this_disk(cls, env: Mapping[str, str] = os.environ) -> ModelStore | None:
        """The store Ollama would use on this machine, or None when there is none."""
        try:
            return cls.locate(env=env)
        except StoreError:
            return None

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / f"sha256-{digest_hex(digest)}"

    def manifest_path(self, name: str) -> Path:
        canonical = canonical_model(name)
        rest, _, tag = canonical.rpartition(":")
        parts = rest.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
        elif len(parts) == 2:
            parts = [DEFAULT_HOST, *parts]
        return self.root.joinpath("manifests", *parts, tag)

    def read_manifest(self, path: Path) -> Manifest:
        try:
            raw = path.read_bytes()
            doc = orjson.loads(raw)
        except (OSError, orjson.JSONDecodeError) as exc:
            raise StoreError(f"cannot read manifest {path}: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
            raise StoreError(f"manifest {path} is not an Ollama manifest (no layers list)")
        config = [doc["config"]] if isinstance(doc.get("config"), dict) else []
        parts = path.relative_to(self.root / "manifests").parts
        return Manifest(
            name=_display_name(parts) if len(parts) == 4 else "/".join(parts),
            path=path,
            digest=hashlib.sha256(raw).hexdigest(),
            modified=datetime.fromtimestamp(path.stat().st_mtime, UTC),
            layers=tuple(_layer(layer, path) for layer in [*config, *doc["layers"]]),
        )

    def manifests(self) -> list[Manifest]:
        """Every model in the store, by name."""
        files = (
            p
            for p in (self.root / "manifests").rglob("*")
            if p.is_file() and not p.name.startswith(".")  # .DS_Store and the like
        )
        return sorted((self.read_manifest(p) for p in files), key=lambda m: m.name)

    def manifest(self, name: str) -> Manifest:
        path = self.manifest_path(name)
        if not path.is_file():
            raise StoreError(
                f"model '{name}' is not in the store at {self.root}; "
                "`ollama-tap models list` shows what is there"
            )
        return self.read_manifest(path)

    def find(self, name: str, digest: str | None) -> Manifest | None:
        """The manifest of `name`, or of any name when only its `digest` matches."""
        path = self.manifest_path(name)
        if path.is_file():
            found = self.read_manifest(path)
            if digest is None or found.digest == digest_hex(digest):
                return found
        if digest is None:
            return None
        return next((m for m in self.manifests() if m.digest == digest_hex(digest)), None)


@dataclass(frozen=True)
class ModelFacts:
    """The key metadata of a model's GGUF header."""

    gguf_version: int
    architecture: str | None
    context_length: int | None
    embedding_length: int | None
    file_type: str | None
    tokenizer_model: str | None
    vocab_size: int | None
    chat_template: bool

    @classmethod
    def from_metadata(cls, meta: GGUFMetadata) -> ModelFacts:
        kv = meta.kv
        arch = _str(kv.get("general.architecture"))
        file_type = kv.get("general.file_type")
        tokens = kv.get("tokenizer.ggml.tokens")
        return cls(
            gguf_version=meta.version,
            architecture=arch,
            context_length=_int(kv.get(f"{arch}.context_length")),
            embedding_length=_int(kv.get(f"{arch}.embedding_length")),
            file_type=_FILE_TYPES.get(file_type, f"type {file_type}")
            if isinstance(file_type, int)
            else None,
            tokenizer_model=_str(kv.get("tokenizer.ggml.model")),
            vocab_size=len(tokens) if isinstance(tokens, list) else None,
            chat_template="tokenizer.chat_template" in kv,
        )


def _str(value: GGUFValue | None) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: GGUFValue | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Inspection:
    """What `models inspect` reports: layers with their blobs, facts, the path for llama.cpp."""

    manifest: Manifest
    blobs: tuple[Path, ...]
    """The blob path of each layer, in `manifest.layers` order."""
    verified: bool
    facts: ModelFacts
    model_path: Path


Advance: TypeAlias = Callable[[int], None]
"""Told the length of each chunk of a blob as it is hashed."""
Watch: TypeAlias = Callable[[Path, int], AbstractContextManager[Advance]]
"""Opened around the hashing of one blob, given its path and size: what a caller shows of it."""


@contextmanager
def unwatched(path: Path, size: int) -> Iterator[Advance]:
    """The `Watch` that shows nothing."""
    yield lambda length: None


def verify_blob(path: Path, layer: Layer, watch: Watch = unwatched) -> None:
    """Check that the blob exists with the layer's size and SHA-256 (streamed)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise StoreError(f"blob {path} of layer {layer.media_type} is missing") from exc
    if size != layer.size:
        raise StoreError(
            f"blob {path} holds {size} bytes but the manifest says {layer.size}; "
            "pull the model again"
        )
    sha = hashlib.sha256()
    with path.open("rb") as f, watch(path, size) as advance:
        while chunk := f.read(_HASH_CHUNK):
            sha.update(chunk)
            advance(len(chunk))
    if sha.hexdigest() != digest_hex(layer.digest):
        raise StoreError(
            f"blob {path} has digest sha256:{sha.hexdigest()}, not {layer.digest}: "
            "it is corrupted; pull the model again"
        )


def inspect(
    store: ModelStore, name: str, verify: bool = True, watch: Watch = unwatched
) -> Inspection:
    """Read a model's manifest, optionally verify every blob (each under `watch`), and read
    its GGUF header."""
    manifest = store.manifest(name)
    blobs = tuple(store.blob_path(layer.digest) for layer in manifest.layers)
    if verify:
        for layer, path in zip(manifest.layers, blobs, strict=True):
            verify_blob(path, layer, watch)
    model_path = store.blob_path(manifest.model_layer.digest)
    try:
        meta = read_metadata(model_path)
    except GGUFError as exc:
        raise StoreError(
            f"the weights of {manifest.name} ({model_path}) are unusable: {exc}"
        ) from exc
    return Inspection(manifest, blobs, verify, ModelFacts.from_metadata(meta), model_path)

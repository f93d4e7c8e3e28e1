"""Which recording answers a request: canonical keys, served order, and the first difference."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ollama_tap.ollama.names import canonical_model
from ollama_tap.recorder.redact import BODY_CAP, scrub

VOLATILE: Final = frozenset({"keep_alive", "stream_options"})
"""Top-level request fields that `--match body` ignores: they do not change the reply's text."""
NORMALISED: Final = "keep_alive and stream_options ignored, a field at null, [] or {} as absent"
"""What `--match body` normalises, as the banner and `--help` say it."""


class MatchMode(enum.StrEnum):
    EXACT = "exact"
    """Every field of the body, volatile and empty ones included."""
    BODY = "body"
    """The body without the VOLATILE fields, a field at null, [] or {} as absent."""
    NEAREST = "nearest"
    """As `body`, and a miss is served by the closest recording on the same route."""


def canonical(body: Any, mode: MatchMode) -> Any:
    """The body as compared: media and credentials as the recorder stores them, no model."""
    body = scrub(body, [])
    if not isinstance(body, dict):
        return body
    if mode is MatchMode.EXACT:
        return {k: v for k, v in body.items() if k != "model"}
    return _without_empty({k: v for k, v in body.items() if k not in {"model", *VOLATILE}})


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if not _empty(v)}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _empty(value: Any) -> bool:
    """What a client sends for a field it leaves at its default (the `ollama` package sends
    `"tools": []`, others leave the field out): `--match body` counts such a field as
    absent, at any depth of an object, as Ollama does."""
    return value is None or value == [] or value == {}


def empty_fields(body: Any, where: str = "") -> list[str]:
    """The fields of a request body that `--match body` counts as absent (for the log)."""
    found: list[str] = []
    if isinstance(body, dict):
        for k, v in body.items():
            at = f"{where}.{k}" if where else k
            found += [at] if _empty(v) else empty_fields(v, at)
    elif isinstance(body, list):
        for i, v in enumerate(body):
            found += empty_fields(v, f"{where}[{i}]")
    return found


@dataclass(frozen=True, slots=True)
class Sketch:
    """What a request is matched on."""

    method: str
    path: str
    model: str | None
    body: Any

    def key(self) -> bytes:
        return orjson.dumps(
            [self.method, self.path, self.model, self.body], option=orjson.OPT_SORT_KEYS
        )


def request_sketch(method: str, path: str, raw: bytes, mode: MatchMode) -> Sketch:
    """The sketch of an incoming request from its bytes."""
    if len(raw) > BODY_CAP:
        return Sketch(method, path, None, _hashed(hashlib.sha256(raw).hexdigest()))
    try:
        parsed = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return Sketch(method, path, None, _hashed(hashlib.sha256(raw).hexdigest()))
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return Sketch(method, path, _model(model), canonical(parsed, mode))


def record_sketch(record: dict[str, Any], mode: MatchMode) -> Sketch | None:
    """The sketch of a recorded request; None when it was recorded without bodies."""
    body = ((record.get("request") or {}).get("body")) or None
    if record.get("mode") != "full":
        return None
    if body is not None and ("json" not in body or body.get("truncated")):
        # Above the recorder's cap, or not JSON: only the bytes' hash can match.
        return Sketch(record["method"], record["path"], None, _hashed(body.get("sha256")))
    parsed = None if body is None else body["json"]
    return Sketch(record["method"], record["path"], record.get("model"), canonical(parsed, mode))


def _hashed(digest: str | None) -> dict[str, Any]:
    return {"$sha256": digest}


def _model(name: Any) -> str | None:
    return canonical_model(name) if isinstance(name, str) and name else None


def first_difference(want: Sketch, have: Sketch) -> str:
    """The first way a recording (`have`) differs from a request (`want`), as one phrase."""
    if want.method != have.method or want.path != have.path:
        return f"route differs: {want.method} {want.path} vs {have.method} {have.path}"
    if want.model != have.model:
        return f"model differs: {want.model} vs {have.model}"
    return _difference(want.body, have.body, "") or "only volatile fields differ"


def _difference(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            at = f"{where}.{k}" if where else k
            if k not in b:
                return f"{at} is not in the recording"
            if k not in a:
                return f"{at} is only in the recording"
            if (found := _difference(a[k], b[k], at)) is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if (found := _difference(x, y, f"{where}[{i}]")) is not None:
                return found
        if len(a) != len(b):
            return f"{where or 'body'} has {len(a)} items, the recording {len(b)}"
        return None
    return None if a == b else f"{where or 'body'} differs"


def _distance(want: Sketch, have: Sketch) -> tuple[int, int, int]:
    """Smaller is closer: the route first, then the model, then how many top fields differ."""
    route = int(want.method != have.method) + int(want.path != have.path)
    a = want.body if isinstance(want.body, dict) else {"": want.body}
    b = have.body if isinstance(have.body, dict) else {"": have.body}
    fields = sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))
    return route, int(want.model != have.model), fields


@dataclass(slots=True)
class Entry:
    """Recordings of one request, oldest first, and how many were served."""

    ids: list[str]
    sketch: Sketch
    served: int = 0


@dataclass(slots=True)
class Library:
    """The servable recordings, by key; serves each key's recordings in order."""

    mode: MatchMode
    loop: bool = False
    entries: dict[bytes, Entry] = field(default_factory=dict)
    refused: dict[tuple[str, str, str | None], list[str]] = field(default_factory=dict)
    """Recordings kept without a whole request body (metadata mode), by method, path, model."""

    def add(self, record: dict[str, Any]) -> None:
        sketch = record_sketch(record, self.mode)
        if sketch is None:
            where = (record["method"], record["path"], record.get("model"))
            self.refused.setdefault(where, []).append(record["id"])
            return
        entry = self.entries.setdefault(sketch.key(), Entry([], sketch))
        entry.ids.append(record["id"])

    def __len__(self) -> int:
        return sum(len(e.ids) for e in self.entries.values())

    def pick(self, want: Sketch) -> str | None:
        """The id of the recording to serve, None on a miss (NEAREST never misses a route)."""
        entry = self.entries.get(want.key())
        if entry is None and self.mode is MatchMode.NEAREST:
            entry = self.closest(want, same_route=True)
        if entry is None:
            return None
        count = len(entry.ids)
        index = entry.served % count if self.loop else min(entry.served, count - 1)
        entry.served += 1
        return entry.ids[index]

    def closest(self, want: Sketch, same_route: bool = False) -> Entry | None:
        candidates = [
            e
            for e in self.entries.values()
            if not same_route or (e.sketch.method, e.sketch.path) == (want.method, want.path)
        ]
        return min(candidates, key=lambda e: _distance(want, e.sketch), default=None)

    def miss(self, want: Sketch, *, explain: bool = True) -> str:
        """Why nothing answers `want`: the closest recording and how it differs. The log
        always says it; a client is told it only under `--explain-misses`, otherwise only
        that nothing matched (`explain` False): naming the closest record and its first
        differing field would answer, one guess at a time, what each recorded body holds
        (an equality oracle on other people's prompts)."""
        refused = self.refused.get((want.method, want.path, want.model))
        if refused:
            which = f" (record {refused[-1]})" if explain else ""
            return (
                f"the recordings of {want.method} {want.path} for {want.model} were made in "
                f"metadata mode{which} and keep no bodies to replay; record with --record "
                "full to replay them"
            )
        if not explain:
            return (
                f"no recording matches {want.method} {want.path} (the replay server's log "
                "names the closest; --explain-misses says it here)"
            )
        closest = self.closest(want)
        if closest is None:
            return f"no recording matches {want.method} {want.path}: the database has none to serve"
        return (
            f"no recording matches {want.method} {want.path}; the closest is record "
            f"{closest.ids[-1]} ({first_difference(want, closest.sketch)})"
        )

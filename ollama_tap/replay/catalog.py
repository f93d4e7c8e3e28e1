"""The poller's routes (/api/version, /api/tags, /api/ps, /api/show, /v1/models), derived
from the records.

Polling routes are recorded without bodies (if at all), so what they answer is derived:
each recorded model with its digest and when it was first seen, loaded for as long as the
replay runs, with the largest `num_ctx` its requests set as the context length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from ollama_tap import ollama

VERSION: Final = "0.0.0"
"""What /api/version says: the recorded Ollama's version is not in the records."""
_FOREVER: Final = "2318-01-01T00:00:00Z"


@dataclass(slots=True)
class Model:
    name: str
    digest: str = ""
    first_seen: float = 0.0
    num_ctx: int | None = None
    capabilities: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Catalog:
    models: dict[str, Model] = field(default_factory=dict)

    def add(self, record: dict[str, Any]) -> None:
        name = record.get("model")
        if not name:
            return
        model = self.models.setdefault(name, Model(name, first_seen=record["started"]))
        model.digest = record.get("model_digest") or model.digest
        num_ctx = (record.get("options") or {}).get("num_ctx")
        if isinstance(num_ctx, int) and num_ctx > (model.num_ctx or 0):
            model.num_ctx = num_ctx
        model.capabilities |= _capabilities(record)

    def tags(self) -> dict[str, Any]:
        return {"models": [self._entry(m) for m in self.models.values()]}

    def ps(self) -> dict[str, Any]:
        entries = []
        for m in self.models.values():
            entry = {**self._entry(m), "expires_at": _FOREVER, "size_vram": 0}
            del entry["modified_at"]
            if m.num_ctx is not None:
                entry["context_length"] = m.num_ctx
            entries.append(entry)
        return {"models": entries}

    def openai_models(self) -> dict[str, Any]:
        """/v1/models: `data` is null when empty, as Ollama's is."""
        data = [
            {"id": m.name, "object": "model", "created": int(m.first_seen),
             "owned_by": m.name.split("/")[-2] if "/" in m.name else "library"}
            for m in self.models.values()
        ]  # fmt: skip
        return {"object": "list", "data": data or None}

    def show(self, name: str) -> dict[str, Any] | None:
        model = self.models.get(name)
        if model is None:
            return None
        return {
            "modelfile": "",
            "parameters": "",
            "template": "",
            "details": _details(),
            "model_info": {},
            "capabilities": sorted(model.capabilities or {"completion"}),
            "modified_at": _time(model.first_seen),
        }

    def _entry(self, m: Model) -> dict[str, Any]:
        return {
            "name": m.name,
            "model": m.name,
            "modified_at": _time(m.first_seen),
            "size": 0,
            "digest": m.digest,
            "details": _details(),
        }


def _capabilities(record: dict[str, Any]) -> set[str]:
    body = ((record.get("request") or {}).get("body") or {}).get("json")
    body = body if isinstance(body, dict) else {}
    if record["endpoint"] in ollama.EMBEDDING_ENDPOINTS:
        return {"embedding"}
    found = {"completion"}
    if body.get("tools"):
        found.add("tools")
    if body.get("think") not in (None, False):
        found.add("thinking")
    return found


def _details() -> dict[str, Any]:
    return {"parent_model": "", "format": "gguf", "family": "", "families": None,
            "parameter_size": "", "quantization_level": ""}  # fmt: skip


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")

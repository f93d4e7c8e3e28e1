"""The rows of /api/ps and /api/tags as the poller reads them, and Go's JSON times."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ollama_tap.ollama.names import is_valid_name
from ollama_tap.ollama.options import INT_FIELDS
from ollama_tap.ollama.payloads import count_or_none, dict_or_none, str_or_empty

Params = tuple[tuple[str, Any], ...]
ShownFacts = tuple[int | None, bool, int | None, str | None, Params, str | None]
"""(training context, vision, the Modelfile's num_keep, the weights' blob digest, its
runner PARAMETERs, its FROM/ADAPTER/DRAFT lines)."""
Shown = tuple[tuple[str, str, str], ShownFacts]
"""What the poller keeps of /api/show: (family, parameter size, quantization), ShownFacts."""
_BLOB: Final = re.compile(r"^FROM \S*sha256[-:]([0-9a-f]{64})\s*$", re.MULTILINE)
_HIDDEN: Final = re.compile(r"^(?:FROM|ADAPTER|DRAFT) .*$", re.MULTILINE)
INT_PARAMS: Final = ("num_ctx", *INT_FIELDS)
"""The Modelfile PARAMETERs among the runner options `needsReload` compares (integers);
`use_mmap` is the boolean one."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """One /api/ps entry."""

    label: str
    digest: str
    size: int
    size_vram: int
    context_length: int | None
    name: str = ""
    """The name /api/ps lists (the name of the request that loaded the runner)."""
    expires_at: float | None = None
    """Unix seconds of `expires_at`, None when absent or unreadable."""
    format: str = ""
    """`details.format`: "gguf", or "safetensors" for an MLX runner (x/mlxrunner)."""


@dataclass(frozen=True, slots=True)
class LocalModel:
    """One /api/tags entry."""

    label: str
    name: str
    digest: str


def go_time(value: object) -> float | None:
    """Unix seconds of a Go `time.Time` in JSON (RFC 3339, up to nanoseconds), else None."""
    if not isinstance(value, str):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def same_model(a: LoadedModel | None, b: LoadedModel | None) -> bool:
    """Whether two /api/ps entries of a name are the same loaded model (digests, when both
    are known, must agree)."""
    if a is None or b is None:
        return a is b
    return not (a.digest and b.digest and a.digest != b.digest)


def entries(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) for each well-formed entry of a /api/tags or /api/ps reply."""
    models = data.get("models")
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in models if isinstance(models, list) else []:
        name = entry.get("name") or entry.get("model") if isinstance(entry, dict) else None
        if isinstance(name, str) and is_valid_name(name):
            out.append((name, entry))
    return out


def shown_facts(data: dict[str, Any]) -> Shown:
    """The details labels, the training context (`<arch>.context_length`) and whether the
    model is a vision one (`capabilities` holds "vision") of an /api/show reply."""
    d = dict_or_none(data.get("details")) or {}
    info = dict_or_none(data.get("model_info")) or {}
    arch = str_or_empty(info.get("general.architecture"))
    details = (
        str_or_empty(d.get("family")),
        str_or_empty(d.get("parameter_size")),
        str_or_empty(d.get("quantization_level")),
    )
    train = count_or_none(info.get(f"{arch}.context_length")) if arch else None
    capabilities = data.get("capabilities")
    vision = isinstance(capabilities, list) and "vision" in capabilities
    modelfile = data.get("modelfile")
    blob = _BLOB.search(modelfile) if isinstance(modelfile, str) else None
    keep = modelfile_num_keep(data.get("parameters"))
    params = modelfile_runner_params(data.get("parameters"))
    hidden = "\n".join(_HIDDEN.findall(modelfile)) if isinstance(modelfile, str) else None
    return details, (train, vision, keep, blob[1] if blob else None, params, hidden)


def modelfile_num_keep(parameters: Any) -> int | None:
    """`num_keep` from /api/show `parameters` (the Modelfile's PARAMETER lines, one
    `name value` a line): the model's default, which a request's options override."""
    for line in parameters.splitlines() if isinstance(parameters, str) else ():
        name, _, value = line.strip().partition(" ")
        if name == "num_keep" and value.strip().lstrip("-").isdigit():
            return int(value.strip())
    return None


def modelfile_runner_params(parameters: Any) -> Params:
    """The runner options a Modelfile sets (/api/show `parameters`: one `name value` a
    line, the name padded), as (name, value) pairs in INT_PARAMS order, then use_mmap."""
    found: dict[str, Any] = {}
    for line in parameters.splitlines() if isinstance(parameters, str) else ():
        name, _, value = line.strip().partition(" ")
        value = value.strip()
        if name in INT_PARAMS and value.lstrip("-").isdigit():
            found[name] = int(value)
        elif name == "use_mmap" and value in ("true", "false"):
            found[name] = value == "true"
    return tuple((n, found[n]) for n in (*INT_PARAMS, "use_mmap") if n in found)

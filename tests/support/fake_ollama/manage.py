"""The native API's model management: pull, push, create, copy, delete, and blobs."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.engine import Engine, Route
from tests.support.fake_ollama.gojson import go_json
from tests.support.fake_ollama.incoming import RECEIVED, json_body, read_body
from tests.support.fake_ollama.models import FakeModel, canonical_name, layers, new_model
from tests.support.fake_ollama.native import native_error, write_ndjson
from tests.support.fake_ollama.replies import Refused, gin_json
from tests.support.fake_ollama.script import Error

_DIGEST = re.compile(r"^sha256[:-][0-9a-fA-F]{64}$")
_EARLY_READ_LIMIT = 256 << 10  # Go's maxPostHandlerReadBytes


async def _progress_reply(
    request: web.Request,
    body: dict[str, Any],
    events: AsyncIterator[dict[str, Any] | Error],
) -> web.StreamResponse:
    if body.get("stream") is not False:
        return await write_ndjson(request, events, lambda obj: obj)
    last: dict[str, Any] | Error = {}
    async for event in events:
        last = event
        if isinstance(event, Error):
            return await native_error(request, event.status, event.message)
    return await gin_json(request, last)


async def pull(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    name = body.get("model") or body.get("name")
    if not name or not isinstance(name, str):
        raise Refused(400, "model is required")
    return await _progress_reply(request, body, _pull_progress(fake, name))


async def _pull_progress(fake: Engine, name: str) -> AsyncIterator[dict[str, Any] | Error]:
    model = fake.find(name) or new_model(canonical_name(name))
    yield {"status": "pulling manifest"}
    for digest, size in layers(model):
        for completed in (0, size // 2, size):
            update = {
                "status": f"pulling {digest[:12]}",
                "digest": f"sha256:{digest}",
                "total": size,
            }
            yield {**update, "completed": completed} if completed else update
    for status in ("verifying sha256 digest", "writing manifest", "success"):
        yield {"status": status}
    fake.models[model.name] = model


async def push(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    name = body.get("model") or body.get("name")
    if not name or not isinstance(name, str):
        raise Refused(400, "model is required")
    return await _progress_reply(request, body, _push_progress(fake, name))


async def _push_progress(fake: Engine, name: str) -> AsyncIterator[dict[str, Any] | Error]:
    yield {"status": "retrieving manifest"}
    model = fake.find(name)
    if model is None:
        yield {"status": "couldn't retrieve manifest"}
        path = "/root/.ollama/models/manifests/registry.ollama.ai/library/" + canonical_name(
            name
        ).replace(":", "/")
        yield Error(f"open {path}: no such file or directory")
        return
    for digest, size in layers(model):
        yield {
            "status": f"pushing {digest[:12]}",
            "digest": f"sha256:{digest}",
            "total": size,
            "completed": size,
        }
    for status in ("pushing manifest", "success"):
        yield {"status": status}


async def create(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    name = body.get("model") or body.get("name")
    if not name or not isinstance(name, str):
        raise Refused(400, "model is required")
    source = body.get("from")
    if not source and not body.get("files"):
        raise Refused(400, "neither 'from' or 'files' was specified")
    base = fake.find(source) if isinstance(source, str) and source else None
    if source and base is None:
        raise Refused(404, f"model '{source}' not found")
    return await _progress_reply(request, body, _create_progress(fake, name, body, base))


async def _create_progress(
    fake: Engine, name: str, body: dict[str, Any], base: FakeModel | None
) -> AsyncIterator[dict[str, Any] | Error]:
    model = replace(base, name=canonical_name(name)) if base else new_model(canonical_name(name))
    if body.get("files"):
        yield {"status": "parsing GGUF"}
    quantize = body.get("quantize")
    if isinstance(quantize, str) and quantize:
        total = model.size * 3
        for completed in (12302, total - 224):
            yield {
                "status": f"quantizing F16 model to {quantize}",
                "digest": "0",
                "total": total,
                "completed": completed,
            }
        yield {"status": "verifying conversion"}
    yield {"status": f"using existing layer sha256:{model.digest}"}
    for key in ("template", "system", "parameters", "license"):
        if body.get(key):
            digest = hashlib.sha256(go_json(body[key])).hexdigest()
            yield {"status": f"creating new layer sha256:{digest}"}
    yield {"status": "writing manifest"}
    yield {"status": "success"}
    fake.models[model.name] = _with_layers(model, body)


def _with_layers(model: FakeModel, body: dict[str, Any]) -> FakeModel:
    """The request's template and system replacing the base model's, its licenses added to
    the base's (server/create.go: setTemplate, setSystem remove the old layer; setLicense
    appends one)."""
    licenses = body.get("license")
    added = [licenses] if isinstance(licenses, str) else licenses
    own = [text for text in added or [] if isinstance(text, str) and text]
    replaced = ("template", "system")
    changes: dict[str, Any] = {k: v for k in replaced if isinstance(v := body.get(k), str) and v}
    if own:
        changes["license"] = "\n".join([model.license, *own] if model.license else own)
    return replace(model, **changes)


async def copy(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    source, destination = body.get("source"), body.get("destination")
    if not isinstance(source, str) or not isinstance(destination, str) or not destination:
        raise Refused(400, "source and destination are required")
    model = fake.find(source)
    if model is None:
        raise Refused(404, f'model "{source}" not found')
    copy = replace(model, name=canonical_name(destination), modified_at=datetime.now(UTC))
    fake.models[copy.name] = copy
    return web.Response(status=200)


async def delete(fake: Engine, request: web.Request) -> web.StreamResponse:
    body = await json_body(request)
    name = body.get("model") or body.get("name")
    model = fake.require(name, "model '{name}' not found")
    del fake.models[model.name]
    fake.loaded.pop(model.name, None)
    return web.Response(status=200)


def _digest(request: web.Request) -> str:
    digest = request.match_info["digest"]
    if not _DIGEST.match(digest):
        raise Refused(400, "invalid digest format")
    return digest


def _blob_key(digest: str) -> str:
    return "sha256:" + digest[7:]


async def head_blob(fake: Engine, request: web.Request) -> web.StreamResponse:
    digest = _digest(request)
    if _blob_key(digest) not in fake.blobs:
        raise Refused(404, f'blob "{digest}" not found')
    return web.Response(status=200)


async def post_blob(fake: Engine, request: web.Request) -> web.StreamResponse:
    digest = _digest(request)
    if _blob_key(digest) in fake.blobs:
        return await _early_answer(request)
    data = await read_body(request)
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != _blob_key(digest):
        raise Refused(400, f'digest mismatch, expected "{digest}", got "{actual}"')
    fake.blobs[actual] = data
    return web.Response(status=201)


async def _early_answer(request: web.Request) -> web.StreamResponse:
    """200 without reading the upload; Go's server drains at most 256 KiB, else closes."""
    drained = bytearray()
    while len(drained) <= _EARLY_READ_LIMIT and not request.content.at_eof():
        piece = await request.content.read(_EARLY_READ_LIMIT + 1 - len(drained))
        if not piece:
            break
        drained += piece
    request[RECEIVED].body = bytes(drained)
    response = web.Response(status=200)
    if not request.content.at_eof():
        response.headers["Connection"] = "close"
        response.force_close()
    return response


ROUTES: list[Route] = [
    ("POST", "/api/pull", pull),
    ("POST", "/api/push", push),
    ("POST", "/api/create", create),
    ("POST", "/api/copy", copy),
    ("DELETE", "/api/delete", delete),
    ("HEAD", "/api/blobs/{digest}", head_blob),
    ("POST", "/api/blobs/{digest}", post_blob),
]

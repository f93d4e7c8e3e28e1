"""The recorder's cheaper paths store exactly what the plain ones did."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from ollama_tap.credentials import REDACTED, is_credential_name
from ollama_tap.exchange import OutputChunk, OutputKind
from ollama_tap.recorder import redact
from ollama_tap.recorder.redact import HEADER_ALLOW, allowed_headers, omitted, scrub
from ollama_tap.recorder.timeline import TEXT_CAP, Timeline, unpack

PNG = "aGVsbG8gd29ybGQ="
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
BODIES: dict[str, Any] = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "data is not a URL"}]},
    "tools": {"model": "m", "tools": [TOOL, TOOL], "messages": [], "context": [1, 2, 3]},
    "native image": {"messages": [{"role": "user", "content": "x", "images": [PNG, 7]}]},
    "data url in a list": {"input": ["plain", f"data:image/png;base64,{PNG}"]},
    "anthropic": {"source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    "not base64": {"source": {"type": "text", "data": "kept"}},
    "vectors": {"embeddings": [[0.5, 1.5], [2.5]], "data": [{"embedding": [0.25]}]},
    "scalars": [None, True, 3, 2.5, "data:text/plain,not base64"],
    "credentials": {"api_key": "s", "meta": [{"token": "t", "max_tokens": 3}], "code": None},
}


def reference_scrub(node: Any, found: list[dict[str, Any]]) -> Any:
    """The walk as it was before it learned to skip leaves and share parts: a full copy."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "images" and isinstance(value, list):
                out[key] = [redact._media(v, found) if isinstance(v, str) else v for v in value]
            elif key == "data" and isinstance(value, str) and node.get("type") == "base64":
                out[key] = redact._media(value, found)
            elif key in {"embedding", "embeddings"} and isinstance(value, list | str):
                out[key] = redact._vectors(key, value)
            elif isinstance(value, str) and is_credential_name(key):
                out[key] = REDACTED
            else:
                out[key] = reference_scrub(value, found)
        return out
    if isinstance(node, list):
        return [reference_scrub(v, found) for v in node]
    if isinstance(node, str) and redact._is_data_url(node):
        return redact._media(node, found)
    return node


@pytest.mark.parametrize("name", BODIES)
def test_scrub_matches_the_full_copy_and_leaves_the_body_alone(name: str) -> None:
    body = BODIES[name]
    before = copy.deepcopy(body)
    found: list[dict[str, Any]] = []
    expected: list[dict[str, Any]] = []
    assert orjson.dumps(scrub(body, found)) == orjson.dumps(reference_scrub(body, expected))
    assert found == expected
    assert body == before


def test_scrub_shares_what_it_does_not_change() -> None:
    body = BODIES["native image"] | {"options": {"seed": 1}}
    out = scrub(body, [])
    assert out is not body and out["options"] is body["options"]
    assert out["messages"][0]["images"] == [omitted("media", b"hello world"), 7]
    plain = BODIES["tools"]
    assert scrub(plain, []) is plain


def test_header_allow_list_is_the_same_on_every_call() -> None:
    headers = {
        "Authorization": "Bearer secret",
        "content-type": "application/json",
        "Content-Type": "text/plain",
        "USER-AGENT": "curl",
        "X-Api-Key": "secret",
    }
    expected = {k: v for k, v in headers.items() if k.lower() in HEADER_ALLOW}
    for _ in range(3):
        assert allowed_headers(headers) == expected
    as_aiohttp = dict(CIMultiDictProxy(CIMultiDict(headers)))
    got = allowed_headers(as_aiohttp)
    assert got == {k: v for k, v in as_aiohttp.items() if k.lower() in HEADER_ALLOW}
    assert all(type(k) is str for k in got)  # orjson refuses istr keys
    assert orjson.dumps(got)


def test_header_names_beyond_the_bound_are_still_decided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redact, "_SPELLINGS", {})
    monkeypatch.setattr(redact, "_SPELLINGS_MAX", 2)
    headers = {f"X-Name-{i}": "v" for i in range(5)} | {"Accept": "*/*", "Cookie": "c"}
    assert allowed_headers(headers) == {"Accept": "*/*"}
    assert len(redact._SPELLINGS) == 2


def test_kinds_and_the_text_cap_across_many_pieces() -> None:
    tl = Timeline(keep_text=True)
    kinds = [OutputKind.THINKING] * 3 + [OutputKind.CONTENT, OutputKind.TOOL_CALL]
    texts = ["a", "x" * (TEXT_CAP - 2), "bc", "", "d"]
    for i, (kind, text) in enumerate(zip(kinds, texts, strict=True)):
        tl.add(float(i), OutputChunk(0.0, kind, text, 9))
    got = unpack(tl.pack())
    assert got["kinds"] == [str(k) for k in kinds]
    assert got["texts"] == ["a", "x" * (TEXT_CAP - 2), "", "", ""]
    assert got["text_truncated"] is True
    assert len(tl.text) == TEXT_CAP - 1


def test_an_empty_timeline_packs() -> None:
    assert unpack(Timeline(keep_text=False).pack())["offsets"] == []

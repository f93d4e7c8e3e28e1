"""The fake Ollama against the real one: the same requests to both, the shapes of the replies
compared (which fields are there and of what JSON type), so the fake cannot drift from what
was measured. Values differ (another model, invented text); shapes must not.

"""

from __future__ import annotations

from typing import Any, Final

import pytest

from tests.ollama_real.conftest import BOTH_RELEASES, GREEDY, MODEL, Ollama, call
from tests.support.fake_ollama import FakeOllama

FAKE_MODEL: Final = "llama3.2"


def shape(value: Any) -> Any:
    """A JSON value's shape: objects by their keys' shapes, arrays by their first item's."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


async def both(
    fake: FakeOllama, real: Ollama, method: str, path: str, body: Any
) -> tuple[Any, Any]:
    """The fake's reply and the real one, the model named as each knows it."""

    def named(model: str) -> Any:
        return {**body, "model": model} if isinstance(body, dict) and "model" in body else body

    faked = await call(fake.url, method, path, named(FAKE_MODEL))
    really = await call(real.url, method, path, named(MODEL))
    assert faked.status == really.status == 200, (faked.body[:300], really.body[:300])
    return faked, really


@pytest.mark.parametrize("endpoint", ["/api/generate", "/api/chat"])
@pytest.mark.parametrize("stream", [False, True])
async def test_the_final_object_has_the_real_fields(
    fake_ollama: FakeOllama, real_ollama: Ollama, endpoint: str, stream: bool
) -> None:
    body: dict[str, Any] = {"model": MODEL, "stream": stream, "options": GREEDY}
    if endpoint == "/api/generate":
        body["prompt"] = "Hello"
    else:
        body["messages"] = [{"role": "user", "content": "Hello"}]
    faked, really = await both(fake_ollama, real_ollama, "POST", endpoint, body)
    if stream:
        assert shape(faked.lines()[0]) == shape(really.lines()[0])
        assert shape(faked.lines()[-1]) == shape(really.lines()[-1])
    else:
        assert shape(faked.json()) == shape(really.json())


@BOTH_RELEASES
async def test_tags_entries_have_the_real_fields(
    fake_ollama: FakeOllama, real_ollama: Ollama
) -> None:
    """v0.30.0 lists `capabilities` and the GGUF's context and embedding lengths; 0.24 does
    not (the fake follows its version: native.py `LISTED_FACTS`)."""
    fake_ollama.version = real_ollama.version
    faked, really = await both(fake_ollama, real_ollama, "GET", "/api/tags", None)
    assert shape(faked.json()["models"][0]) == shape(really.json()["models"][0])


@BOTH_RELEASES
async def test_ps_rows_have_the_real_fields(fake_ollama: FakeOllama, real_ollama: Ollama) -> None:
    await both(fake_ollama, real_ollama, "POST", "/api/generate", {"model": MODEL})  # loaded
    faked, really = await both(fake_ollama, real_ollama, "GET", "/api/ps", None)
    assert shape(faked.json()["models"][0]) == shape(really.json()["models"][0])


def show_shape(reply: dict[str, Any]) -> Any:
    """A /api/show reply's shape, `model_info` as a mapping only: its keys are the
    architecture's (llama and gemma3 share few), its values what the GGUF holds."""
    return {**shape(reply), "model_info": "dict"}


@pytest.mark.parametrize("verbose", [False, True])
async def test_show_has_the_real_fields(
    fake_ollama: FakeOllama, real_ollama: Ollama, verbose: bool
) -> None:
    """A model made the same way in both, with a system prompt and a license of its own
    (Ollama adds a license layer to the base's, replaces the system layer), then shown."""
    made = {"system": "You answer in one word.", "license": "MIT", "stream": False}
    # The fake's base like the imported GGUF: no license, no parameters of its own.
    for server, base in ((fake_ollama.url, "qwen3:8b"), (real_ollama.url, MODEL)):
        asked = {"model": "parity", "from": base, **made}
        created = await call(server, "POST", "/api/create", asked)
        assert created.status == 200, created.body
    try:
        asked = {"model": "parity", "verbose": verbose}
        faked = (await call(fake_ollama.url, "POST", "/api/show", asked)).json()
        really = (await call(real_ollama.url, "POST", "/api/show", asked)).json()
        assert show_shape(faked) == show_shape(really)
        assert really["system"] == faked["system"] == made["system"]
        assert really["license"].endswith("MIT") and faked["license"].endswith("MIT")
    finally:
        await call(real_ollama.url, "DELETE", "/api/delete", {"model": "parity"})


@BOTH_RELEASES
async def test_show_leaves_out_what_a_bare_gguf_lacks(
    fake_ollama: FakeOllama, real_ollama: Ollama
) -> None:
    """A model imported from a bare GGUF has no license or system: Ollama leaves those
    fields out (`omitempty`), as the fake does for a model without them."""
    really = (await call(real_ollama.url, "POST", "/api/show", {"model": MODEL})).json()
    faked = (await call(fake_ollama.url, "POST", "/api/show", {"model": "qwen3:8b"})).json()
    for reply in (really, faked):
        assert "license" not in reply and "system" not in reply
        assert all(value != "" for value in reply.values()), reply.keys()

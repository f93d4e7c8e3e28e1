"""The fake Ollama against the real one: the same requests to both, the shapes of the replies
compared (which fields are there and of what JSON type), so the fake cannot drift from what
was measured. Values differ (another model, invented text); shapes must not.

"""

from __future__ import annotations

from typing import Any, Final

import pytest

from tests.ollama_real.conftest import GREEDY, MODEL, Ollama, call
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


async def test_tags_entries_have_the_real_fields(
    fake_ollama: FakeOllama, real_ollama: Ollama
) -> None:
    faked, really = await both(fake_ollama, real_ollama, "GET", "/api/tags", None)
    assert shape(faked.json()["models"][0]) == shape(really.json()["models"][0])

"""Privacy: credentials never stored; metadata mode keeps no text; media and vectors hashed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.config import Settings
from ollama_tap.credentials import is_credential_name, redacted_path, redacted_query
from ollama_tap.exchange import Outcome
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.export import har, write_jsonl
from ollama_tap.recorder.redact import BODY_CAP, scrub
from ollama_tap.recorder.store import Filters
from tests.recorder.conftest import raw_bytes
from tests.recorder.factory import (
    SECRET_HEADER,
    SECRET_PROMPT,
    chat_body,
    drive,
    exchange,
    make_settings,
    pieces,
    stored,
)

pytestmark = pytest.mark.usefixtures("blockbuster")
CREDENTIALS = (b"HEADER-SECRET", b"COOKIE-SECRET", b"XKEY-SECRET", b"SETCOOKIE-SECRET")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
PNG_B64 = base64.b64encode(PNG).decode()


@pytest.fixture
def settings(tmp_path: Path, db: Path | str) -> Settings:
    """The `recorder` fixture's settings: these tests run against each store."""
    return make_settings(tmp_path, db=db)


@pytest.fixture
def everything_in(db: Path | str, request: pytest.FixtureRequest) -> Callable[[], bytes]:
    """Every byte the store holds (the files, or a pg_dump), read in a thread."""
    server = request.getfixturevalue("pg_server") if isinstance(db, str) else None
    return lambda: raw_bytes(db, server)


async def record_one(tmp_path: Path, mode: str, db: Path | str) -> tuple[Recorder, str]:
    """A generate exchange with secrets in a header, the query, the prompt, the output
    and the context; the recorder stopped (checkpointed) afterwards."""
    rec = Recorder(make_settings(tmp_path, record=mode, db=db), CollectorRegistry())
    await rec.start()
    final = {"model": "m", "done": True, "context": [918273, 645546], "response": ""}
    ex = exchange(
        endpoint="/api/generate",
        body={"model": "m", "prompt": SECRET_PROMPT, "images": [PNG_B64], "options": {"seed": 7}},
        final=final,
    )
    drive(rec, ex, pieces(4))
    await rec.stop()
    return rec, ex.id


async def exports(rec: Recorder) -> bytes:
    def run() -> bytes:
        out = io.BytesIO()
        write_jsonl(rec.store.each(Filters()), out)
        return out.getvalue() + orjson.dumps(har(rec.store.each(Filters()), "test"))

    return await asyncio.to_thread(run)


async def test_metadata_mode_stores_no_text_and_no_credentials(
    tmp_path: Path, db: Path | str, everything_in: Callable[[], bytes]
) -> None:
    rec, record_id = await record_one(tmp_path, "metadata", db)
    everything = await asyncio.to_thread(everything_in) + await exports(rec)
    for secret in (*CREDENTIALS, SECRET_PROMPT.encode(), b"QUERY-SECRET", b"tok1", b"918273"):
        assert secret not in everything, secret
    assert b"10.1.2.3" not in everything
    r = await stored(rec, record_id)
    assert r["context_len"] == 2
    assert "context" not in r
    assert r["options"] == {"seed": 7}
    assert r["media"] == [
        {"$omitted": "media", "bytes": len(PNG), "sha256": hashlib.sha256(PNG).hexdigest()}
    ]
    timeline = r["timeline"]
    assert timeline["texts"] is None
    assert timeline["bytes"] == [60] * 4
    assert timeline["offsets"] == pytest.approx([0.5, 0.52, 0.54, 0.56])
    assert "output" not in r
    assert "request" not in r


async def test_full_mode_has_the_prompt_but_never_a_credential(
    tmp_path: Path, db: Path | str, everything_in: Callable[[], bytes]
) -> None:
    rec, record_id = await record_one(tmp_path, "full", db)
    everything = await asyncio.to_thread(everything_in) + await exports(rec)
    assert SECRET_PROMPT.encode() in everything
    for secret in CREDENTIALS:
        assert secret not in everything, secret
    assert SECRET_HEADER.encode() not in everything
    r = await stored(rec, record_id)
    assert r["request"]["headers"] == {
        "User-Agent": "ollama-python/0.6.3",
        "Content-Type": "application/json",
    }
    assert r["context"] == [918273, 645546]


async def test_media_in_all_three_shapes_is_size_and_sha256(
    recorder: Recorder, everything_in: Callable[[], bytes]
) -> None:
    data_url = f"data:image/png;base64,{PNG_B64}"
    body = chat_body(
        messages=[
            {"role": "user", "content": "native", "images": [PNG_B64]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                    }
                ],
            },
        ]
    )
    ex = exchange(body=body)
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    placeholder = {
        "$omitted": "media",
        "bytes": len(PNG),
        "sha256": hashlib.sha256(PNG).hexdigest(),
    }
    assert r["media"] == [placeholder] * 3
    messages = r["request"]["body"]["json"]["messages"]
    assert messages[0]["images"] == [placeholder]
    assert messages[1]["content"][0]["image_url"]["url"] == placeholder
    assert messages[2]["content"][0]["source"]["data"] == placeholder
    assert PNG_B64[:100].encode() not in await asyncio.to_thread(everything_in)


async def test_embedding_vectors_are_size_and_sha256(recorder: Recorder) -> None:
    vector = [0.25, -0.5, 0.125]
    final = {"model": "e", "embeddings": [vector, vector]}
    ex = exchange(endpoint="/api/embed", body={"model": "e", "input": ["a", "b"]}, final=final)
    ex.streamed = False
    drive(recorder, ex)
    await recorder.stop()
    r = await stored(recorder, ex.id)
    text = orjson.dumps(vector)
    expected = {
        "$omitted": "vector",
        "bytes": len(text),
        "sha256": hashlib.sha256(text).hexdigest(),
    }
    assert r["response"]["body"]["json"]["embeddings"] == [expected, expected]


async def test_bodies_over_one_mib_are_cut_and_marked(recorder: Recorder) -> None:
    body = orjson.dumps(chat_body(prompt="x" * (2 * BODY_CAP)))
    ex = exchange(body=body, outcome=Outcome.UPSTREAM_ERROR, status=400)
    drive(recorder, ex)
    await recorder.stop()
    stored_body = (await stored(recorder, ex.id))["request"]["body"]
    assert stored_body["truncated"] is True
    assert stored_body["size"] == len(body)
    assert stored_body["sha256"] == hashlib.sha256(body).hexdigest()
    assert BODY_CAP - 4 <= len(stored_body["text"].encode()) <= BODY_CAP


async def test_full_mode_redacts_credentials_in_the_query(
    tmp_path: Path, db: Path | str, everything_in: Callable[[], bytes]
) -> None:
    rec, record_id = await record_one(tmp_path, "full", db)
    everything = await asyncio.to_thread(everything_in) + await exports(rec)
    assert b"QUERY-SECRET" not in everything
    r = await stored(rec, record_id)
    assert r["query"] == "client=app&key=[redacted]"


def test_query_redaction_rules() -> None:
    assert redacted_query("") == ""
    assert redacted_query("a=1&API_KEY=s&access_token=t&b") == (
        "a=1&API_KEY=[redacted]&access_token=[redacted]&b"
    )
    assert redacted_query("api%5Fkey=s&token") == "api%5Fkey=[redacted]&token"
    # Any name with a credential word in it, `;` as a separator too; others keep values.
    assert redacted_query(
        "client_secret=a&refresh_token=b&x-goog-api-key=c&session=d;id_token=e&passwd=f"
        "&X-Amz-Signature=g&X-Amz-Credential=h&sig=i&code=j&model=llama3&stream=true"
    ) == (
        "client_secret=[redacted]&refresh_token=[redacted]&x-goog-api-key=[redacted]"
        "&session=[redacted];id_token=[redacted]&passwd=[redacted]&X-Amz-Signature=[redacted]"
        "&X-Amz-Credential=[redacted]&sig=[redacted]&code=[redacted]&model=llama3&stream=true"
    )


def test_query_names_the_old_rule_missed() -> None:
    assert redacted_query("jwt=a&bearer=b&pass=c&Passphrase=d&model=m") == (
        "jwt=[redacted]&bearer=[redacted]&pass=[redacted]&Passphrase=[redacted]&model=m"
    )
    # `api_key;x=v` is one name to aiohttp and Python (`api_key;x`), a pair to others.
    assert redacted_query("api_key;x=Qddd&a=1;token=t&b=2") == (
        "api_key;x=[redacted]&a=1;token=[redacted]&b=2"
    )


def test_path_parameters_lose_credential_values() -> None:
    assert redacted_path("/api/generate") == "/api/generate"
    assert redacted_path("/api/generate;token=PSECRET") == "/api/generate;token=[redacted]"
    assert (
        redacted_path("/a;v=1;api_key=s/b;sig=t;x")
        == "/a;v=1;api_key=[redacted]/b;sig=[redacted];x"
    )


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("api_key", True), ("apiKey", True), ("password", True), ("client_secret", True),
        ("Authorization", True), ("X-Amz-Signature", True), ("sig", True), ("code", True),
        ("model", False), ("prompt", False), ("design", False), ("messages", False),
        ("keep_alive", False), ("encoded", False), ("num_predict", False),
    ],
)  # fmt: skip
def test_one_rule_for_credential_names(name: str, credential: bool) -> None:
    assert is_credential_name(name) is credential


def test_credential_keys_of_a_body_are_redacted_wherever_they_are() -> None:
    body = {
        "model": "m",
        "api_key": "BODYSECRET-111",
        "metadata": {"token": "BODYSECRET-222", "user": "kept"},
        "messages": [{"role": "user", "content": "my password is in the text, kept"}],
        "tools": [{"function": {"parameters": {"properties": {"token": {"type": "string"}}}}}],
        "max_tokens": 5,
        "code": "print('a coding tool's argument, kept')",
    }
    out = scrub(body, [])
    assert out["code"] == body["code"]
    assert out["api_key"] == out["metadata"]["token"] == "[redacted]"
    assert out["metadata"]["user"] == "kept" and out["max_tokens"] == 5
    assert out["messages"] is body["messages"] and out["tools"] is body["tools"]
    assert body["api_key"] == "BODYSECRET-111"  # the body itself is never changed


async def test_full_mode_stores_no_credential_of_a_json_body(
    tmp_path: Path, db: Path | str, everything_in: Callable[[], bytes]
) -> None:
    rec = Recorder(make_settings(tmp_path, record="full", db=db), CollectorRegistry())
    await rec.start()
    body = {"model": "m", "prompt": "hi", "password": "BODYSECRET-333", "options": {"seed": 1}}
    ex = exchange(endpoint="/api/generate", body=body)
    drive(rec, ex, pieces(2))
    await rec.stop()
    everything = await asyncio.to_thread(everything_in) + await exports(rec)
    assert b"BODYSECRET" not in everything
    stored_body = (await stored(rec, ex.id))["request"]["body"]
    assert stored_body["json"]["password"] == "[redacted]"
    # The hash is still that of the bytes sent: a record can be matched to its request.
    assert stored_body["sha256"] == hashlib.sha256(ex.request_body).hexdigest()


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        (b'{"model":"m","messages":[{"role":"user","content":"hi"}],"api_key":"BADJSON-1",}',
         b'"content":"hi"'),
        (b"model=phi4&prompt=hi&api_key=FORMSECRET-1", b"prompt=hi"),
        (b'{"model": "m", "metadata": {"token": 12345678,}, "password": "PW-SECRET-9"', b"m"),
    ],
    ids=["trailing-comma", "form", "unclosed"],
)  # fmt: skip
async def test_a_body_that_is_not_json_keeps_no_credential(
    tmp_path: Path,
    db: Path | str,
    everything_in: Callable[[], bytes],
    body: bytes,
    kept: bytes,
) -> None:
    """Stored as text, such a body kept its credentials verbatim (in the WAL too)."""
    rec = Recorder(make_settings(tmp_path, record="full", db=db), CollectorRegistry())
    await rec.start()
    ex = exchange(endpoint="/api/generate", body={"model": "m"})
    ex.request_body, ex.request_bytes = body, len(body)
    drive(rec, ex, pieces(2))
    await rec.stop()
    everything = await asyncio.to_thread(everything_in) + await exports(rec)
    for secret in (b"BADJSON-1", b"FORMSECRET-1", b"12345678", b"PW-SECRET-9"):
        assert secret not in everything, secret
    text = (await stored(rec, ex.id))["request"]["body"]["text"]
    assert kept.decode() in text and "[redacted]" in text

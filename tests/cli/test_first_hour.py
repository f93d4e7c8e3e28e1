"""What a newcomer's first commands meet: a missing database, typos, counts, defaults, and
`models list` without a model store on this disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest

from ollama_tap.cli import build_parser, main
from ollama_tap.config import Settings
from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama
from tests.support.records import records


@pytest.fixture
async def one_record(proxy_factory: MakeProxy) -> Path:
    """A database holding one record, written by a proxy."""
    proxy = await proxy_factory()
    async with aiohttp.ClientSession() as s:
        body = {"model": "llama3.2", "prompt": "hi", "stream": False}
        async with s.post(proxy.url + "/api/generate", json=body) as resp:
            assert resp.status == 200
    await records(proxy, 1)
    return proxy.settings.db_path


def test_records_on_a_missing_database_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing.db"
    for action in (["list"], ["show", "r01"], ["export"]):
        assert main(["records", *action, "--db", str(missing)]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"ollama-tap records: no database at {missing}; `ollama-tap serve` records there "
            "(or give --db FILE)\n"
        )
    assert not missing.exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["recrods", "list"], "invalid choice: 'recrods'; did you mean records?"),
        (["records", "lsit"], "invalid choice: 'lsit'; did you mean list?"),
        (["records", "list", "--limt", "3"], "unrecognized argument --limt; did you mean --limit?"),
        (["serve", "--prot=8080"], "unrecognized argument --prot; did you mean --port?"),
        (
            ["serve", "--no-metircs"],
            "unrecognized argument --no-metircs; did you mean --no-metrics?",
        ),
    ],
)
def test_a_typo_gets_a_suggestion(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {said}")


async def test_right_spellings_and_abbreviations_pass(one_record: Path) -> None:
    argv = ["records", "list", "--lim", "1", "--db", str(one_record)]
    assert await asyncio.to_thread(main, argv) == 0


async def test_one_record_is_one_record(
    one_record: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await asyncio.to_thread(main, ["records", "list", "--db", str(one_record)]) == 0
    out = capsys.readouterr().out
    assert "1 record" in out and "1 records" not in out


def test_serve_help_shows_the_computed_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.1.2.3:4567")
    settings = Settings.model_validate({})
    sub = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = " ".join(sub.format_help().split())
    assert "[default: http://10.1.2.3:4567; env OLLAMA_TAP_UPSTREAM]" in text
    assert f"[default: {settings.db_path}; env OLLAMA_TAP_DB]" in text.replace("- ", "-")
    assert "[default: full (on 127.0.0.1); env OLLAMA_TAP_RECORD]" in text
    assert "generated, kept in" in text


async def test_models_list_falls_back_to_ollamas_list(
    fake_ollama: FakeOllama, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-store-here"))
    argv = ["models", "list", "--json", "--url", fake_ollama.url]
    assert await asyncio.to_thread(main, argv) == 0
    captured = capsys.readouterr()
    listed = orjson.loads(captured.out)
    async with aiohttp.ClientSession() as s, s.get(f"{fake_ollama.url}/api/tags") as resp:
        expected = [m["name"] for m in (await resp.json())["models"]]
    assert expected
    assert [m["name"] for m in listed] == expected
    assert all(m["digest"] and m["size"] > 0 and m["modified"] for m in listed)
    assert f"listing {fake_ollama.url}/api/tags" in captured.err

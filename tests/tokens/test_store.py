"""The model-store walk and the `models` / `decode` commands on a synthetic store."""

from __future__ import annotations

import argparse
import io
import shutil
from pathlib import Path

import orjson
import pytest

from ollama_tap.cli import decode, models
from ollama_tap.tokens.errors import StoreError
from ollama_tap.tokens.store import ModelStore, candidate_roots, inspect
from tests.tokens.synth import add_model, gguf_bytes, vocab_kv


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ollama-tap")
    sub = parser.add_subparsers(required=True)
    decode.register(sub)
    models.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_locate_prefers_ollama_models(tmp_path: Path, store: Path) -> None:
    assert ModelStore.locate(env={"OLLAMA_MODELS": str(store)}).root == store
    assert candidate_roots({})[0] == Path.home() / ".ollama" / "models"
    assert ModelStore.on_this_disk({"OLLAMA_MODELS": str(tmp_path / "missing")}) is None
    with pytest.raises(StoreError, match=r"no Ollama model store at .*; pass --store DIR"):
        ModelStore.locate(tmp_path / "missing")


def test_list(store: Path) -> None:
    found = ModelStore(store).manifests()
    assert [m.name for m in found] == ["someone/tiny:q4", "tiny:latest"]
    assert all(len(m.digest) == 64 for m in found)
    assert found[1].size == sum(layer.size for layer in found[1].layers)


def test_inspect_verifies_and_reads_facts(store: Path) -> None:
    found = inspect(ModelStore(store), "tiny")
    facts = found.facts
    assert (facts.architecture, facts.context_length, facts.embedding_length) == (
        "llama",
        4096,
        2048,
    )
    assert (facts.file_type, facts.tokenizer_model, facts.vocab_size) == ("Q4_K_M", "llama", 12)
    assert facts.chat_template
    assert found.verified
    assert found.model_path.read_bytes()[:4] == b"GGUF"
    assert [layer.media_type.rpartition(".")[2] for layer in found.manifest.layers] == [
        "application/vnd.docker.container.image.v1+json".rpartition(".")[2], "model", "template"
    ]  # fmt: skip


def test_names_resolve_like_ollama(store: Path) -> None:
    s = ModelStore(store)
    assert s.manifest("registry.ollama.ai/library/tiny:latest").name == "tiny:latest"
    assert s.manifest("someone/tiny:q4").name == "someone/tiny:q4"


def _corrupt(store: Path, name: str, data: bytes) -> Path:
    layer = ModelStore(store).manifest(name).model_layer
    path = ModelStore(store).blob_path(layer.digest)
    path.write_bytes(data)
    return path


def test_digest_mismatch(store: Path, spm_gguf: bytes) -> None:
    _corrupt(store, "tiny", spm_gguf[:-1] + b"?")  # same size, one byte flipped
    with pytest.raises(StoreError, match="is corrupted; pull the model again"):
        inspect(ModelStore(store), "tiny")
    assert inspect(ModelStore(store), "tiny", verify=False).facts.vocab_size == 12


def test_size_mismatch_and_truncated_gguf(store: Path, spm_gguf: bytes) -> None:
    _corrupt(store, "tiny", spm_gguf[:100])
    with pytest.raises(StoreError, match="holds 100 bytes but the manifest says"):
        inspect(ModelStore(store), "tiny")
    with pytest.raises(StoreError, match=r"are unusable: .* truncated or corrupt"):
        inspect(ModelStore(store), "tiny", verify=False)


def test_not_gguf(tmp_path: Path) -> None:
    add_model(tmp_path, "notgguf:latest", b"PK\x03\x04 a zip file")
    with pytest.raises(StoreError, match="not a GGUF file"):
        inspect(ModelStore(tmp_path), "notgguf")


def test_unknown_model(store: Path) -> None:
    with pytest.raises(StoreError, match="model 'nope' is not in the store"):
        inspect(ModelStore(store), "nope")


def test_missing_blob(store: Path) -> None:
    ModelStore(store).blob_path(ModelStore(store).manifest("tiny").model_layer.digest).unlink()
    with pytest.raises(StoreError, match="is missing"):
        inspect(ModelStore(store), "tiny")


def test_real_vocabulary_as_model_blob(tmp_path: Path, vocab_dir: Path) -> None:
    copy = tmp_path / "phi3.gguf"
    shutil.copyfile(vocab_dir / "ggml-vocab-phi-3.gguf", copy)
    add_model(tmp_path / "models", "phi3:mini", copy.read_bytes())
    facts = inspect(ModelStore(tmp_path / "models"), "phi3:mini").facts
    assert (facts.architecture, facts.tokenizer_model, facts.vocab_size) == ("phi3", "llama", 32064)
    assert facts.chat_template


def test_cli_models_list(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "list", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "tiny:latest" in out
    assert "someone/tiny:q4" in out
    assert run(["models", "list", "--store", str(store), "--json"]) == 0
    assert [m["name"] for m in orjson.loads(capsys.readouterr().out)] == [
        "someone/tiny:q4", "tiny:latest"
    ]  # fmt: skip


def test_cli_models_inspect(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "inspect", "tiny:latest", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "blobs verified" in out
    assert "Q4_K_M" in out
    assert "llama.cpp model path: " + str(store / "blobs") in out
    assert run(["models", "inspect", "tiny", "--store", str(store), "--json", "--no-verify"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["verified"] is False
    assert doc["gguf"]["vocab_size"] == 12
    assert doc["layers"][1]["media_type"] == "application/vnd.ollama.image.model"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["models", "list", "--store", "/nonexistent"], "no Ollama model store at /nonexistent"),
        (["models", "inspect", "ghost"], "model 'ghost' is not in the store"),
    ],
)
def test_cli_models_errors(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if "--store" not in argv:
        argv = [*argv, "--store", str(store)]
    assert run(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert captured.err.count("\n") == 1


def test_cli_decode_from_store(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    assert run(["decode", "--model", "tiny", "1", "4", "5", "6", "7", "2"]) == 0
    assert capsys.readouterr().out == "<s> Hello, world!</s>\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("[1, 4, 6]"))
    assert run(["decode", "--model", "tiny", "--hide-control", "--json", "--tokens"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["text"] == "Hello world"
    assert [t["kind"] for t in doc["tokens"]] == ["control", "normal", "normal"]


def test_cli_decode_gguf_tokens_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v.gguf"
    path.write_bytes(gguf_bytes(vocab_kv("gpt2", ["Ġhi", "Ċ", "<|end|>"], [1, 1, 3])))
    assert run(["decode", "--gguf", str(path), "--tokens", "0,1", "2"]) == 0
    out = capsys.readouterr().out
    assert "\\n" in out
    assert "<|end|>" in out
    assert "control" in out


@pytest.mark.parametrize(
    ("stdin", "ids", "message"),
    [
        ("", [], "no token ids given"),
        ("[]", [], "no token ids given"),
        ("hello there", [], "must be a JSON array of integers"),
        ('[1, "2"]', [], "must be a JSON array of integers"),
        ("[1.5]", [], "must be a JSON array of integers"),
        ("[1,", [], "must be a JSON array of integers"),
        ("", ["99"], "token id 99 is outside this vocabulary of 12 tokens"),
    ],
)
def test_cli_decode_bad_input(
    store: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: str,
    ids: list[str],
    message: str,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert run(["decode", "--model", "tiny", "--store", str(store), *ids]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.startswith("ollama-tap decode: ")


def test_cli_decode_unreachable_upstream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unused_tcp_port: int
) -> None:
    (tmp_path / "manifests").mkdir()
    argv = ["decode", "--model", "ghost", "--store", str(tmp_path), "1"]
    assert run([*argv, "--url", f"http://127.0.0.1:{unused_tcp_port}"]) == 1
    assert f"cannot reach Ollama at http://127.0.0.1:{unused_tcp_port}" in capsys.readouterr().err


def test_cli_decode_bad_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.gguf").write_bytes(b"GGML1234")
    assert run(["decode", "--gguf", str(tmp_path / "x.gguf"), "1"]) == 1
    assert "not a GGUF file" in capsys.readouterr().err

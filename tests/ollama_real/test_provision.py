"""v0.30.0's runner folder as provisioning writes it: needs no build, so it runs everywhere."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.engine import provision as engine
from tests.ollama_real.provision import QUANTIZE, install_runner


def test_the_runner_wrapper_turns_no_mmap_into_load_mode_and_passes_the_rest(
    tmp_path: Path,
) -> None:
    """Ollama v0.30.0's `--no-mmap` becomes `--load-mode none` for the llama.cpp built here;
    every other argument reaches the engine's llama-server as given, spaces and all."""
    server = engine.server_path(tmp_path)
    server.parent.mkdir(parents=True)
    server.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    server.chmod(0o755)
    lib = install_runner(tmp_path)
    given = ["--model", "/models/a b.gguf", "--no-mmap", "-c", "4096", "--no-webui"]
    done = subprocess.run(
        [str(lib / "llama-server"), *given], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "--model", "/models/a b.gguf", "--load-mode", "none", "-c", "4096", "--no-webui",
    ]  # fmt: skip
    assert (lib / QUANTIZE).readlink() == server.with_name(QUANTIZE)


def test_the_runner_folder_follows_the_engine(tmp_path: Path) -> None:
    """Written again when the engine's paths change (another cache, another llama.cpp), left
    alone when they do not."""
    lib = install_runner(tmp_path / "one")
    wrapper = lib / "llama-server"
    wrapper.write_text(wrapper.read_text().replace(str(tmp_path / "one"), str(tmp_path / "old")))
    (lib / QUANTIZE).unlink()
    (lib / QUANTIZE).symlink_to(tmp_path / "old" / QUANTIZE)
    install_runner(tmp_path / "one")
    assert str(engine.server_path(tmp_path / "one")) in wrapper.read_text()
    assert (lib / QUANTIZE).readlink() == engine.server_path(tmp_path / "one").with_name(QUANTIZE)
    before = wrapper.stat().st_mtime_ns
    install_runner(tmp_path / "one")
    assert wrapper.stat().st_mtime_ns == before

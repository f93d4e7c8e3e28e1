"""`ollama-tap top`: one frame for scripts (`--once`), and live under tmux at 80×24."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from rich.console import Console

from ollama_tap.cli.top import frame
from tests.conftest import Proxy
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.metrics import upstream_polled
from tests.support.serve_process import ADMIN_TOKEN
from tests.support.tmux import printed


async def run(*argv: str) -> tuple[int, str, str]:
    """A command, off the event loop the proxy answers on."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


def top(proxy: Proxy, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ollama_tap",
        "top",
        "--url",
        proxy.url,
        "--token",
        ADMIN_TOKEN,
        *extra,
    ]


async def generate(session: aiohttp.ClientSession, url: str, client: str) -> None:
    body = {"model": "llama3.2", "prompt": "hi"}
    async with session.post(
        f"{url}/api/generate", json=body, headers={"X-Ollama-Tap-Client": client}
    ) as r:
        await r.read()


@pytest.fixture
async def two_in_flight(proxy: Proxy, fake_ollama: FakeOllama) -> AsyncIterator[None]:
    """One stream streaming (for a minute, or until the test ends) and one waiting behind it
    for the one slot."""
    fake_ollama.slots.limit = 1
    fake_ollama.script = Script(tokens=[f"t{i} " for i in range(600)], token_delay=0.1)
    await upstream_polled(proxy)
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(generate(session, proxy.url, "writer"))]
        await asyncio.sleep(0.3)
        tasks.append(asyncio.create_task(generate(session, proxy.url, "reviewer")))
        await asyncio.sleep(0.3)
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def shows_both(screen: str) -> bool:
    lines = screen.splitlines()
    streaming = any("writer" in ln and "streaming" in ln for ln in lines)
    waiting = any("reviewer" in ln and "waiting" in ln for ln in lines)
    return streaming and waiting and "2 in flight" in screen


async def test_once_prints_one_frame_in_80_columns(proxy: Proxy, two_in_flight: None) -> None:
    code, out, err = await run(*top(proxy, "--once"))
    assert code == 0, err
    assert shows_both(out), out
    assert "waiting: 1 llama3.2:latest" in out
    assert max(len(line) for line in out.splitlines()) <= 80


async def test_once_names_the_fix_when_the_token_is_wrong(proxy: Proxy) -> None:
    code, out, err = await run(
        sys.executable, "-m", "ollama_tap", "top", "--once", "--url", proxy.url, "--token", "x" * 40
    )
    assert code == 1 and out == ""
    assert "refused the admin token; pass --token-file or --token" in err


async def test_once_names_the_fix_when_nothing_listens() -> None:
    code, _, err = await run(
        sys.executable, "-m", "ollama_tap", "top", "--once", "--url", "http://127.0.0.1:9"
    )
    assert code == 1 and "is `ollama-tap serve` running?" in err


async def test_live_under_tmux_at_80_by_24_and_q_quits(proxy: Proxy, two_in_flight: None) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (`apt-get install tmux`)")
    tmux = ["tmux", "-L", f"ollama-tap-top-{os.getpid()}"]
    command = " ".join(top(proxy))
    code, _, err = await run(*tmux, "new-session", "-d", "-x", "80", "-y", "24", "-s", "t", command)
    assert code == 0, err
    try:
        screens = []
        for _ in range(50):
            _, screen, _ = await run(*tmux, "capture-pane", "-p", "-t", "t")
            screens.append(screen)
            if shows_both(screen):
                break
            await asyncio.sleep(0.2)
        assert shows_both(screens[-1]), screens[-1]
        # Refreshed every second: the streaming row's elapsed time moves on.
        await asyncio.sleep(1.5)
        _, later, _ = await run(*tmux, "capture-pane", "-p", "-t", "t")
        assert later != screens[-1]
        await run(*tmux, "send-keys", "-t", "t", "q")
        for _ in range(50):
            code, _, _ = await run(*tmux, "has-session", "-t", "t")
            if code:
                break
            await asyncio.sleep(0.1)
        assert code, "q ended top"
    finally:
        await run(*tmux, "kill-server")


async def test_never_wider_than_the_terminal(
    proxy: Proxy, two_in_flight: None, tmp_path: Path
) -> None:
    argv = top(proxy, "--once")[3:]  # after `python -m ollama_tap`
    for width in (80, 60, 48):
        (where := tmp_path / str(width)).mkdir()
        screen = await asyncio.to_thread(printed, where, argv, width)
        assert max(len(line) for line in screen) <= width, (width, screen)
        assert shows_both("\n".join(screen)), screen


LONG = {
    "in_flight": 1, "waiting": {},
    "exchanges": [{
        "id": "x", "client": "code-helper-with-a-long-name", "endpoint": "/v1/chat/completions",
        "model": "hf.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M", "phase": "streaming",
        "elapsed": 123.4, "outputs": 12345, "rate": 123.4, "position": None,
    }],
}  # fmt: skip


@pytest.mark.parametrize("width", [80, 60, 40])
def test_a_frame_gives_way_names_first_then_decoration(width: int) -> None:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(frame(LONG, "http://127.0.0.1:11435", width=width))
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    row = next(line for line in lines if "streaming" in line)  # the phase is never cut
    assert "2m03s" in row and "code-" in row and "hf.co/" in row

"""`top` and `loads` send this machine's admin token to this machine's tap only, and never
across a redirect; a bad --url or a foreign reply is one line."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.serve_process import free_port

LOCAL_TOKEN = "local-token-from-the-file-0123456789"


class Listener:
    """A server on 127.0.0.1 that logs each request's Authorization header."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[str | None] = []
        self.redirect_to: str | None = None
        self.reply: dict[str, object] = {"in_flight": 0, "waiting": {}, "exchanges": []}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.headers.get("Authorization"))
        if self.redirect_to is not None:
            raise web.HTTPFound(self.redirect_to + request.path_qs)
        return web.json_response(self.reply)


@pytest.fixture
async def listeners() -> AsyncIterator[tuple[Listener, Listener]]:
    pair = (Listener(), Listener())
    runners = []
    for one in pair:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", one.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", one.port).start()
        runners.append(runner)
    yield pair
    for runner in runners:
        await runner.cleanup()


async def run(tmp_path: Path, *argv: str, port: int | None = None) -> tuple[int, str]:
    """The command with a local `serve`'s token file under `tmp_path`, configured on `port`."""
    data = tmp_path / "ollama-tap"
    data.mkdir(mode=0o700, exist_ok=True)
    (data / "admin-token").write_text(LOCAL_TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_TAP_")}
    env["XDG_DATA_HOME"] = str(tmp_path)
    if port is not None:
        env["OLLAMA_TAP_PORT"] = str(port)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ollama_tap", *argv, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, err.decode()


COMMANDS = [["top", "--once"], ["loads"]]


@pytest.mark.parametrize("command", COMMANDS)
async def test_the_local_token_goes_to_the_local_tap_only(
    tmp_path: Path, listeners: tuple[Listener, Listener], command: list[str]
) -> None:
    tap, _ = listeners
    tap.reply["loads"] = []
    url = f"http://127.0.0.1:{tap.port}"
    await run(tmp_path, *command, "--url", url)  # not the port `serve` is configured on
    await run(tmp_path, *command, "--url", url, port=tap.port)  # this machine's tap
    assert tap.seen == [None, f"Bearer {LOCAL_TOKEN}"]


@pytest.mark.parametrize("command", COMMANDS)
async def test_no_token_crosses_a_redirect(
    tmp_path: Path, listeners: tuple[Listener, Listener], command: list[str]
) -> None:
    first, second = listeners
    first.redirect_to = f"http://localhost:{second.port}"
    url = f"http://127.0.0.1:{first.port}"
    code, err = await run(tmp_path, *command, "--url", url, port=first.port)
    assert first.seen == [f"Bearer {LOCAL_TOKEN}"] and second.seen == []
    assert code == 1 and err.count("\n") == 1
    assert "redirect (302)" in err and "not followed" in err and LOCAL_TOKEN not in err
    token_file = tmp_path / "remote-token"
    token_file.write_text("remote-token-0123456789abcdef\n")
    code, _ = await run(tmp_path, *command, "--url", url, "--token-file", str(token_file))
    assert first.seen[-1] == "Bearer remote-token-0123456789abcdef" and second.seen == []


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("url", ["bogus", "http://[::1", "ftp://127.0.0.1/"])
async def test_a_bad_url_is_one_line(tmp_path: Path, command: list[str], url: str) -> None:
    code, err = await run(tmp_path, *command, "--url", url)
    assert code == 1 and err.count("\n") == 1 and "--url" in err
    assert "Traceback" not in err


async def test_a_reply_that_is_not_the_taps_is_one_line(
    tmp_path: Path, listeners: tuple[Listener, Listener]
) -> None:
    tap, _ = listeners
    tap.reply = {"something": "else"}
    for command in COMMANDS:
        code, err = await run(tmp_path, *command, "--url", f"http://127.0.0.1:{tap.port}")
        assert code == 1 and "is it ollama-tap?" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS)
async def test_a_token_over_plain_http_to_another_host_is_warned_of(
    tmp_path: Path, command: list[str]
) -> None:
    url = "http://tap.example.invalid:11435"
    code, err = await run(tmp_path, *command, "--url", url, "--token", "given-token-0123456789")
    assert code == 1 and "over plain HTTP" in err and "given-token" not in err
    code, err = await run(tmp_path, *command, "--url", url)  # no token: nothing to warn of
    assert code == 1 and "over plain HTTP" not in err

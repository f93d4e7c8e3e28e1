"""A loopback bind is one whose addresses are loopback, however `--host` spells it: the
DNS-rebinding Host rule, the default record mode and `--admin-token none` follow from it."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import aiohttp
import pytest

from ollama_tap.config import ConfigError, RecordMode, Settings, all_loopback, binds_loopback
from ollama_tap.serve import _check_bound
from tests.conftest import MakeProxy
from tests.support.fake_ollama import FakeOllama
from tests.support.serve_process import serve
from tests.support.transparency import fetch

LOOPBACK_SPELLINGS = ["127.1", "localhost", "0x7f.1", "127.0.0.1", "hostname"]


def spelled(host: str) -> str:
    if host != "hostname":
        return host
    name = socket.gethostname()
    if not binds_loopback(name):
        pytest.skip(f"this machine's name {name!r} does not resolve to loopback only")
    return name


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_the_decision_follows_the_addresses(host: str) -> None:
    settings = Settings(host=spelled(host))
    assert settings.loopback_bind
    assert settings.record_mode is RecordMode.FULL
    Settings(host=spelled(host), admin_token="none").check()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "10.1.2.3"])
def test_other_binds_are_not_loopback(host: str) -> None:
    assert not Settings(host=host).loopback_bind
    assert Settings(host=host).record_mode is RecordMode.METADATA


def test_addresses_are_loopback_only_when_all_are() -> None:
    assert all_loopback(["127.0.0.1", "::1", "127.0.1.1", "::ffff:127.0.0.1"])
    assert not all_loopback(["127.0.0.1", "0.0.0.0"])
    assert not all_loopback([])


def test_a_host_that_does_not_resolve_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"cannot be resolved.*IP address"):
        Settings(host="no-such-host.invalid").check()


def test_serve_refuses_sockets_less_loopback_than_decided() -> None:
    _check_bound(Settings(host="127.1"), ["127.0.0.1"])
    _check_bound(Settings(host="0.0.0.0"), ["0.0.0.0", "::"])
    with pytest.raises(ConfigError, match="give an IP address"):
        _check_bound(Settings(host="127.1"), ["127.0.0.1", "192.168.1.5"])


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_a_foreign_host_is_refused_on_every_spelling_of_loopback(
    proxy_factory: MakeProxy, host: str
) -> None:
    proxy = await proxy_factory(host=spelled(host))
    async with aiohttp.ClientSession() as s:
        for path in ("/api/tags", "/api/delete", "/_tap/healthz", "/metrics"):
            status, _, body = await fetch(
                s, "GET", proxy.url + path, headers={"Host": "evil.example"}
            )
            assert (status, body) == (403, b""), path
        status, _, _ = await fetch(s, "GET", proxy.url + "/api/tags")
        assert status == 200


async def test_serve_on_127_1_applies_the_host_rule(
    fake_ollama: FakeOllama, tmp_path: Path
) -> None:
    proc, url = await serve(fake_ollama.url, tmp_path / "r.db", "--host", "127.1", capture=True)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(
            b"GET /api/tags?via=evil HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        )
        reply = await reader.read(-1)
        writer.close()
        assert reply.startswith(b"HTTP/1.1 403 ")
        assert not [r for r in fake_ollama.received if "evil" in r.path_qs]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await proc.communicate()
    assert b"recording: full" in stderr

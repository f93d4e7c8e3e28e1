"""The header rules, table by table, without sockets (the socket tests check the HTTP/1
server follows them byte for byte)."""

from __future__ import annotations

import pytest
from yarl import URL

from ollama_tap.relay.headers import (
    LAST_CHUNK,
    UpstreamTarget,
    chunk_frames,
    error_response,
    interim_head,
    kept_headers,
    response_head,
    upstream_head,
)

HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "upgrade"})


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ([("A", "1"), ("B", "2")], [("A", "1"), ("B", "2")]),
        ([("Connection", "keep-alive"), ("A", "1")], [("A", "1")]),
        # Names a Connection header lists are hop-by-hop too (RFC 9110 §7.6.1).
        ([("Connection", "close, X-Trace"), ("X-Trace", "t"), ("A", "1")], [("A", "1")]),
        ([("connection", " X-Trace "), ("x-trace", "t")], []),
        ([("Transfer-Encoding", "chunked"), ("TE", "trailers"), ("a", "1")], [("a", "1")]),
        # Order and spelling are kept, repeated names too.
        ([("b", "1"), ("A", "2"), ("B", "3")], [("b", "1"), ("A", "2"), ("B", "3")]),
    ],
)
def test_kept_headers_drop_hop_by_hop_and_what_connection_names(
    headers: list[tuple[str, str]], kept: list[tuple[str, str]]
) -> None:
    assert kept_headers(headers, HOP) == kept
    assert kept_headers(iter(headers), HOP) == kept  # any iterable of pairs


@pytest.mark.parametrize(
    ("method", "headers", "body", "streamed", "head", "chunked"),
    [
        ("GET", [("Host", "p")], None, False, "GET /t HTTP/1.1\r\nHost: up:1\r\n\r\n", False),
        (
            "POST",
            [("Host", "p"), ("Content-Type", "application/json")],
            b"{}",
            False,
            "POST /t HTTP/1.1\r\nHost: up:1\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\n\r\n",
            False,
        ),
        # The client's own length passes as it is.
        (
            "POST",
            [("content-length", "2"), ("Host", "p")],
            b"{}",
            False,
            "POST /t HTTP/1.1\r\nHost: up:1\r\ncontent-length: 2\r\n\r\n",
            False,
        ),
        (
            "POST",
            [("Host", "p"), ("Transfer-Encoding", "chunked")],
            None,
            True,
            "POST /t HTTP/1.1\r\nHost: up:1\r\nTransfer-Encoding: chunked\r\n\r\n",
            True,
        ),
        (
            "DELETE",
            [],
            None,
            False,
            "DELETE /t HTTP/1.1\r\nHost: up:1\r\nContent-Length: 0\r\n\r\n",
            False,
        ),
        ("HEAD", [], None, False, "HEAD /t HTTP/1.1\r\nHost: up:1\r\n\r\n", False),
        # An expectation the proxy met itself is not passed on.
        (
            "POST",
            [("Expect", "100-continue"), ("Content-Length", "2")],
            b"{}",
            False,
            "POST /t HTTP/1.1\r\nHost: up:1\r\nContent-Length: 2\r\n\r\n",
            False,
        ),
    ],
)
def test_upstream_head_frames_the_body(
    method: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    streamed: bool,
    head: str,
    chunked: bool,
) -> None:
    got = upstream_head(method, "/t", headers, "up:1", body, streamed=streamed)
    assert got == (head.encode(), chunked)


def test_header_bytes_that_are_not_utf8_go_back_out_as_they_came() -> None:
    value = b"caf\xe9".decode("utf-8", "surrogateescape")
    head, _ = upstream_head("GET", "/", [("X-Name", value)], "up", None, streamed=False)
    assert b"X-Name: caf\xe9\r\n" in head


@pytest.mark.parametrize(
    ("status", "headers", "method", "keep", "lines", "chunked"),
    [
        (
            200,
            [("Content-Type", "application/x-ndjson")],
            "POST",
            True,
            ["HTTP/1.1 200 OK", "Content-Type: application/x-ndjson", "Transfer-Encoding: chunked"],
            True,
        ),
        (
            200,
            [("Content-Length", "5"), ("Connection", "keep-alive")],
            "GET",
            True,
            ["HTTP/1.1 200 OK", "Content-Length: 5"],
            False,
        ),
        (
            200,
            [("Content-Length", "5")],
            "GET",
            False,
            ["HTTP/1.1 200 OK", "Content-Length: 5", "Connection: close"],
            False,
        ),
        # A HEAD reply keeps the length of the body it does not carry, and is not chunked.
        (
            200,
            [("Content-Length", "5")],
            "HEAD",
            True,
            ["HTTP/1.1 200 OK", "Content-Length: 5"],
            False,
        ),
        (200, [], "HEAD", True, ["HTTP/1.1 200 OK"], False),
        (204, [("Content-Length", "0")], "DELETE", True, ["HTTP/1.1 204 OK"], False),
        (
            304,
            [("Content-Length", "9"), ("ETag", "e")],
            "GET",
            True,
            ["HTTP/1.1 304 OK", "ETag: e"],
            False,
        ),
        (
            404,
            [("Transfer-Encoding", "chunked")],
            "POST",
            True,
            ["HTTP/1.1 404 OK", "Transfer-Encoding: chunked"],
            True,
        ),
    ],
)
def test_response_head_for_an_http_1_1_client(
    status: int,
    headers: list[tuple[str, str]],
    method: str,
    keep: bool,
    lines: list[str],
    chunked: bool,
) -> None:
    head, is_chunked, until_close = response_head(
        status, "OK", headers, method, keep_alive=keep, version="1.1"
    )
    assert head == ("\r\n".join(lines) + "\r\n\r\n").encode()
    assert is_chunked is chunked and not until_close


@pytest.mark.parametrize(
    ("headers", "keep", "lines", "until_close"),
    [
        # No chunking in HTTP/1.0: a body without a length ends with the connection.
        ([("Content-Type", "x")], True, ["HTTP/1.0 200 OK", "Content-Type: x"], True),
        ([("Content-Type", "x")], False, ["HTTP/1.0 200 OK", "Content-Type: x"], True),
        # A length keeps the connection the client asked to keep, and says so.
        (
            [("Content-Length", "5")],
            True,
            ["HTTP/1.0 200 OK", "Content-Length: 5", "Connection: keep-alive"],
            False,
        ),
        ([("Content-Length", "5")], False, ["HTTP/1.0 200 OK", "Content-Length: 5"], False),
    ],
)
def test_response_head_for_an_http_1_0_client(
    headers: list[tuple[str, str]], keep: bool, lines: list[str], until_close: bool
) -> None:
    head, chunked, closes = response_head(200, "OK", headers, "GET", keep_alive=keep, version="1.0")
    assert head == ("\r\n".join(lines) + "\r\n\r\n").encode()
    assert not chunked and closes is until_close


def test_an_interim_reply_loses_its_hop_by_hop_headers() -> None:
    head = interim_head(103, "Early Hints", [("Link", "</a>"), ("Connection", "x")])
    assert head == b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"


@pytest.mark.parametrize(("keep", "close"), [(True, False), (False, True)])
def test_a_proxy_made_error_has_aiohttps_head(keep: bool, close: bool) -> None:
    raw = error_response(
        502, b'{"error":"x"}', keep_alive=keep, date="Tue, 01 Dec 2026 00:00:00 GMT"
    )
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 502 Bad Gateway"
    assert lines[1:4] == [
        "Content-Type: application/json",
        "Content-Length: 13",
        "Date: Tue, 01 Dec 2026 00:00:00 GMT",
    ]
    assert lines[4].startswith("Server: Python/") and "aiohttp/" in lines[4]
    assert ("Connection: close" in lines) is close
    assert body == b'{"error":"x"}'


def test_chunk_frames_copy_small_pieces_and_not_large_ones() -> None:
    assert chunk_frames(b"abc") == (b"3\r\nabc\r\n",)
    large = b"x" * 20000
    frames = chunk_frames(large)
    assert len(frames) == 3 and frames[1] is large
    assert b"".join(frames) == b"4e20\r\n" + large + b"\r\n"
    assert LAST_CHUNK == b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("upstream", "host", "path"),
    [
        (
            "http://127.0.0.1:11434",
            "127.0.0.1:11434",
            "/api/tags?x=1",
        ),
        ("http://[::1]:11434", "[::1]:11434", "/api/tags?x=1"),
        # OLLAMA_HOST with a path: the prefix goes before the client's target.
        (
            "http://gpu:8080/ollama/",
            "gpu:8080",
            "/ollama/api/tags?x=1",
        ),
        # The scheme's default port is named (a valid Host either way).
        (
            "https://gpu.example",
            "gpu.example:443",
            "/api/tags?x=1",
        ),
    ],
)
def test_the_target_changes_only_the_origin_and_prefix(upstream: str, host: str, path: str) -> None:
    target = UpstreamTarget(URL(upstream))
    assert target.host == host
    assert target.path("/api/tags?x=1") == path


def test_the_target_keeps_the_clients_encoding() -> None:
    target = UpstreamTarget(URL("http://127.0.0.1:11434"))
    raw = "//api/../show%2Fx?q=a%20b"
    assert target.path(raw) == raw

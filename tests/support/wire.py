"""HTTP/1.1 on a raw socket: requests written by hand, responses read off the stream."""

from __future__ import annotations

import asyncio


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: localhost:11435", f"Content-Length: {len(body)}"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


def get(path: str, *extra: str, version: str = "1.1") -> bytes:
    head = [f"GET {path} HTTP/{version}", "Host: localhost:11435", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One HTTP/1.1 response off the socket: status line, headers, de-chunked body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    while head.startswith("HTTP/1.1 1"):  # 100 Continue: the answer follows
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
    status, *lines = head.strip("\r\n").split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines)}
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            body += await reader.readexactly(size + 2)
            body = body[:-2]
            if size == 0:
                break
    else:
        body = await reader.read()
    return status, headers, body

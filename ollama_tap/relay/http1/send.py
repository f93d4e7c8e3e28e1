"""What a request goes upstream as, and sending one the moment it arrived whole."""

from __future__ import annotations

from ollama_tap.relay.headers import UpstreamTarget, upstream_head
from ollama_tap.relay.http1.pool import UpstreamPool
from ollama_tap.relay.http1.request import FrontRequest


def send_on_arrival(pool: UpstreamPool, target: UpstreamTarget, request: FrontRequest) -> bool:
    """Send a request that arrived whole upstream from the callback it arrived in, on an
    idle pooled connection, before its exchange is made; its relay adopts the reply.

    The exchange's task runs only after every other callback of this loop turn (other
    streams' tokens, other requests), and making the Exchange and its relay costs as much
    again: the first token's wait would include both. The bytes are those `Http1Relay.send`
    would write. Without an idle connection the relay connects itself (False).
    """
    conn = pool.idle()
    if conn is None:
        return False
    body = request.body.whole() if request.has_body else None
    head, _ = request_head(target, request, body, streamed=False)
    request.sent = conn.send(
        head + (body or b""), head_only=request.method == "HEAD", complete=True
    )
    return True


def request_head(
    target: UpstreamTarget,
    request: FrontRequest,
    body: bytes | None,
    *,
    streamed: bool,
    rewritten: bool = False,
) -> tuple[bytes, bool]:
    """The head this request goes upstream with, and whether its body goes chunked."""
    return upstream_head(
        request.method,
        target.path(request.rel_url.raw_path_qs),
        target.headers_of(request),
        target.host,
        body,
        streamed=streamed,
        rewritten=rewritten,
    )

"""Stream readers in a burst: nanoseconds per relayed line, by how many lines each read carries.

Feeds a reader from `ollama.reader_for` a whole stream (TOKENS token lines, then the final
object), cut into pieces of 1, 10 or 64 lines, as a socket read would carry them when Ollama
streams as fast as it can. Each figure is the best of several rounds, per line (the final
line and `close` included).

    .venv/bin/python -m bench.readers [--tokens 512] [--rounds 30]
"""

from __future__ import annotations

import argparse
import time

from ollama_tap import ollama
from ollama_tap.exchange import Exchange

CREATED = b'"created_at":"2026-01-01T00:00:00.000000Z"'
GENERATE = b'{"model":"bench",' + CREATED + b',"response":" tok","done":false}\n'
CHAT = (
    b'{"model":"bench",' + CREATED + b',"message":{"role":"assistant","content":" tok"},'
    b'"done":false}\n'
)
STATS = (
    b'"done":true,"done_reason":"stop","total_duration":1000000,"load_duration":1000,'
    b'"prompt_eval_count":10,"prompt_eval_duration":1000,"eval_count":512,'
    b'"eval_duration":900000}\n'
)
GENERATE_FINAL = b'{"model":"bench",' + CREATED + b',"response":"",' + STATS
CHAT_FINAL = (
    b'{"model":"bench",' + CREATED + b',"message":{"role":"assistant","content":""},' + STATS
)
OPENAI = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,'
    b'"model":"bench","system_fingerprint":"fp_ollama","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":" tok"},"finish_reason":null}]}\n\n'
)
OPENAI_FINAL = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,'
    b'"model":"bench","system_fingerprint":"fp_ollama","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)

# name: (endpoint, content type, token line or event, end of stream)
STREAMS = {
    "generate": ("/api/generate", "application/x-ndjson", GENERATE, GENERATE_FINAL),
    "chat": ("/api/chat", "application/x-ndjson", CHAT, CHAT_FINAL),
    "chat crlf": (
        "/api/chat",
        "application/x-ndjson",
        CHAT.replace(b"\n", b"\r\n"),
        CHAT_FINAL.replace(b"\n", b"\r\n"),
    ),
    "openai sse": ("/v1/chat/completions", "text/event-stream", OPENAI, OPENAI_FINAL),
}
LINES_PER_FEED = (1, 10, 64)


def exchange(endpoint: str, content_type: str) -> Exchange:
    ex = Exchange(
        method="POST",
        path=endpoint,
        query="",
        endpoint=endpoint,
        client="127.0.0.1",
        request_headers={},
    )
    ex.status, ex.content_type, ex.streamed = 200, content_type, True
    return ex


def pieces(token: bytes, final: bytes, tokens: int, per_feed: int) -> list[bytes]:
    """The stream cut every `per_feed` token lines (the final object rides the last piece)."""
    out = [token * per_feed for _ in range(tokens // per_feed)]
    out.append(token * (tokens % per_feed) + final)
    return out


def run(endpoint: str, content_type: str, stream: list[bytes]) -> float:
    """Seconds to read `stream` once with a fresh reader."""
    ex = exchange(endpoint, content_type)
    reader = ollama.reader_for(ex, 1 << 20)
    assert reader is not None
    feed = reader.feed
    start = time.perf_counter()
    for i, piece in enumerate(stream):
        feed(piece, float(i))
    reader.close(0.0)
    elapsed = time.perf_counter() - start
    assert reader.complete and not reader.errored
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"ns per line ({args.tokens} tokens + final, best of {args.rounds})")
    print(f"{'stream':<12}" + "".join(f"{f'{n}/feed':>10}" for n in LINES_PER_FEED))
    for name, (endpoint, content_type, token, final) in STREAMS.items():
        row = f"{name:<12}"
        for per_feed in LINES_PER_FEED:
            stream = pieces(token, final, args.tokens, per_feed)
            best = min(run(endpoint, content_type, stream) for _ in range(args.rounds))
            row += f"{best / (args.tokens + 1) * 1e9:>10.0f}"
        print(row)


if __name__ == "__main__":
    main()

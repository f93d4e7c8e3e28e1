"""Dropped chat history on a real Ollama: what each candidate rule would say, against the truth.

Ollama's stage 1 (`server/prompt.go` `chatPrompt`) drops whole old messages from a chat that
does not fit `num_ctx` and answers 200 with the count of what it kept. The proxy sees each
request's messages and each reply's `prompt_eval_count` (P), `eval_count` and timings, and
the runtime context C; it does not see the rendered prompt. This script runs varied
multi-turn chats through a real `ollama serve` (the real-Ollama tier's build: Ollama 0.24.0,
Gemma 3 270M), asks Ollama for the truth after every turn (`_debug_render_only`, which
returns the prompt after stage 1: every message carries a tag `[mN]`, and a tag missing from
the render is a dropped message), and scores the candidate rules on what the proxy has:

- `T4 k`: estimated tokens (characters / 4 + 4 a message, the usual rule of thumb) above
  k × C, for k in 1, 1.25, 1.5, 2;
- `T5`: the conversation grew (the previous request's messages are a prefix of this one's)
  but P did not (P ≤ the previous P);
- `T5 slack`: P grew by less than the new messages' characters / 16;
- `T5 shipped`: the proxy's own T5 (`ollama_tap/truncation/history.py`), fed each request
  and its reply as the proxy sees them: `T5 slack` as shipped;
- `T1`: P = C, the stage-2 cut the proxy reports already (0.24's Go runner keeps exactly C).

    eval "$(python tests/ollama_real/provision.py --env)"
    nice python bench/dropped_history.py [--chats 200] [--long 40] [--json FILE]

Prints, per rule, its false verdicts on requests where nothing was dropped (and on how many
ordinary chats) and its true verdicts on requests that lost messages; docs/diagnoses.md
quotes the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from ollama_tap.exchange import Exchange, RequestFields
from ollama_tap.truncation.context import Runtime
from ollama_tap.truncation.history import Conversations

MODEL: Final = "gemma3:270m"
WORDS: Final = [
    "river",
    "stone",
    "cloud",
    "lamp",
    "garden",
    "engine",
    "silver",
    "quiet",
    "sky",
    "window",
    "paper",
    "orange",
    "music",
    "bridge",
    "winter",
    "signal",
    "harbor",
    "forest",
    "candle",
    "mirror",
]
LONG_WORDS: Final = [
    "internationalization",
    "counterrevolutionary",
    "electroencephalography",
    "uncharacteristically",
    "incomprehensibilities",
]
CJK: Final = "数据模型上下文窗口截断消息历史会话令牌"
CODE: Final = "def f(x):\n    return {'k': [x, x * 2, 0x1F]}  # {i}\n"
RULES: Final = ("T1", "T4 1", "T4 1.25", "T4 1.5", "T4 2", "T5", "T5 slack", "T5 shipped")


def text(rng: random.Random, size: int) -> str:
    """About `size` characters of one kind: words, long words, digits, code or CJK."""
    kind = rng.choice(("words", "words", "long", "digits", "code", "cjk"))
    parts: list[str] = []
    if kind == "cjk":  # about a token a character, where the others take three to five
        size //= 3
    while sum(len(p) + 1 for p in parts) < size:
        if kind == "words":
            parts.append(rng.choice(WORDS))
        elif kind == "long":
            parts.append(rng.choice(LONG_WORDS))
        elif kind == "digits":
            parts.append(str(rng.randint(0, 10**9)))
        elif kind == "code":
            parts.append(CODE.replace("{i}", str(rng.randint(0, 99))))
        else:
            parts.append("".join(rng.choices(CJK, k=8)))
    return " ".join(parts)


@dataclass
class Chat:
    num_ctx: int
    num_keep: int | None
    system: str | None
    turns: list[tuple[str, str]]
    """(user, assistant) pairs; the assistant text is the client's copy of the reply."""
    long: bool


def chats(rng: random.Random, count: int, long: bool) -> list[Chat]:
    """Ordinary chats sized to fit C (a quarter to three quarters of it, by the rule of
    thumb), or long ones meant to outgrow it."""
    found = []
    for _ in range(count):
        num_ctx = rng.choice((512, 768, 1024) if long else (512, 1024, 2048, 3000))
        turns = rng.randint(6, 12) if long else rng.randint(2, 6)
        budget = num_ctx * 4 * (rng.uniform(2.0, 4.0) if long else rng.uniform(0.25, 0.75))
        per = int(budget / (2 * turns + 1))
        pairs = [
            (text(rng, rng.randint(per // 3, per)), text(rng, rng.randint(per // 4, per // 2)))
            for _ in range(turns)
        ]
        system = text(rng, rng.randint(20, 200)) if rng.random() < 0.5 else None
        keep = rng.choice((None, None, 0, 4, 24))
        found.append(Chat(num_ctx, keep, system, pairs, long))
    return found


@dataclass
class Turn:
    chat: int
    long: bool
    num_ctx: int
    messages: list[dict[str, str]]
    prompt: int
    total_ns: int
    load_ns: int
    prompt_ns: int
    eval_ns: int
    eval_count: int
    dropped: int
    """Non-system messages missing from the prompt Ollama rendered (the truth)."""
    verdicts: set[str] = field(default_factory=set)


def call(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base + path, orjson.dumps(body), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as resp:
        found: dict[str, Any] = orjson.loads(resp.read())
        return found


def messages_of(chat: Chat, upto: int) -> list[dict[str, str]]:
    """The request of turn `upto`: every earlier pair, then this turn's user message; each
    message tagged `[mN]` so that the render shows which were kept."""
    out = [{"role": "system", "content": chat.system}] if chat.system else []
    n = 0
    for i, (user, assistant) in enumerate(chat.turns[: upto + 1]):
        out.append({"role": "user", "content": f"[m{n}] {user}"})
        n += 1
        if i < upto:
            out.append({"role": "assistant", "content": f"[m{n}] {assistant}"})
            n += 1
    return out


def run_chat(base: str, index: int, chat: Chat) -> list[Turn]:
    found = []
    options: dict[str, Any] = {"num_ctx": chat.num_ctx, "num_predict": 1, "temperature": 0}
    if chat.num_keep is not None:
        options["num_keep"] = chat.num_keep
    for upto in range(len(chat.turns)):
        messages = messages_of(chat, upto)
        body = {"model": MODEL, "messages": messages, "stream": False, "options": options}
        reply = call(base, "/api/chat", body)
        render = call(base, "/api/chat", {**body, "_debug_render_only": True})
        rendered = render["_debug_info"]["rendered_template"]
        tagged = sum(1 for m in messages if m["role"] != "system")
        kept = sum(1 for n in range(tagged) if f"[m{n}]" in rendered)
        found.append(Turn(
            index, chat.long, chat.num_ctx, messages, reply.get("prompt_eval_count", 0),
            reply.get("total_duration", 0), reply.get("load_duration", 0),
            reply.get("prompt_eval_duration", 0), reply.get("eval_duration", 0),
            reply.get("eval_count", 0), tagged - kept,
        ))  # fmt: skip
    return found


def estimate(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) // 4 + 4 for m in messages)


def shipped(memory: Conversations, turn: Turn) -> bool:
    """The proxy's T5 on one turn, as its observer would run it at the exchange's end."""
    ex = Exchange(method="POST", path="/api/chat", query="", endpoint="/api/chat",
                  client="127.0.0.1", request_headers={})  # fmt: skip
    ex.status, ex.request = 200, RequestFields(model=MODEL, parsed=True)
    ex.request_body = orjson.dumps({"model": MODEL, "messages": turn.messages})
    return memory.judge(ex, Runtime(turn.num_ctx, (0, 24, 0)), turn.prompt) is not None


def judge(turns: list[Turn], memory: Conversations) -> None:
    """The candidate rules' verdicts on each turn of one chat, from what the proxy sees."""
    previous: Turn | None = None
    for turn in turns:
        c, p = turn.num_ctx, turn.prompt
        if shipped(memory, turn):
            turn.verdicts.add("T5 shipped")
        if p == c:
            turn.verdicts.add("T1")
        for k in (1, 1.25, 1.5, 2):
            if estimate(turn.messages) > k * c:
                turn.verdicts.add(f"T4 {k:g}")
        if previous is not None and turn.messages[: len(previous.messages)] == previous.messages:
            new = turn.messages[len(previous.messages) :]
            if p <= previous.prompt:
                turn.verdicts.add("T5")
            if p - previous.prompt < sum(len(m["content"]) for m in new) / 16:
                turn.verdicts.add("T5 slack")
        previous = turn


def queue_ms(turn: Turn) -> float:
    return max(0, turn.total_ns - turn.load_ns - turn.prompt_ns - turn.eval_ns) / 1e6


def report(turns: list[Turn]) -> dict[str, Any]:
    clean = [t for t in turns if not t.dropped]
    dropped = [t for t in turns if t.dropped]
    ordinary_chats = {t.chat for t in turns if not t.long}
    spoiled = {t.chat for t in turns if not t.long and t.dropped}
    rules = {}
    for rule in RULES:
        false_chats = {t.chat for t in clean if rule in t.verdicts and t.chat in ordinary_chats}
        rules[rule] = {
            "false": sum(rule in t.verdicts for t in clean),
            "false_ordinary_chats": len(false_chats),
            "true": sum(rule in t.verdicts for t in dropped),
        }
    waits = {
        "clean": sorted(queue_ms(t) for t in clean),
        "dropped": sorted(queue_ms(t) for t in dropped),
    }
    return {
        "requests": len(turns),
        "clean_requests": len(clean),
        "dropped_requests": len(dropped),
        "ordinary_chats": len(ordinary_chats),
        "ordinary_chats_with_a_drop": len(spoiled),
        "rules": rules,
        "queue_wait_ms": {
            k: {"median": v[len(v) // 2] if v else None, "max": v[-1] if v else None}
            for k, v in waits.items()
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve(binary: str, gguf: str, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
        "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(home / "models"),
        "OLLAMA_NUM_PARALLEL": "1", "OLLAMA_MAX_LOADED_MODELS": "1",
    }  # fmt: skip
    log = (home / "serve.log").open("wb")
    proc = subprocess.Popen([binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/api/version", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    modelfile = home / "Modelfile"
    modelfile.write_text(f"FROM {gguf}\n")
    subprocess.run([binary, "create", MODEL, "-f", str(modelfile)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    return proc, base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=200, help="ordinary chats")
    parser.add_argument("--long", type=int, default=40, help="chats that outgrow num_ctx")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    binary, gguf = os.environ.get("OLLAMA_TAP_TEST_OLLAMA"), os.environ.get("OLLAMA_TAP_TEST_GGUF")
    if not (binary and gguf):
        sys.exit("set OLLAMA_TAP_TEST_OLLAMA and OLLAMA_TAP_TEST_GGUF (provision.py --env)")
    # A stopped run still stops its `ollama serve` (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    plan = chats(rng, args.chats, long=False) + chats(rng, args.long, long=True)
    # The ordinary chats first, then the long ones (the few that show drops); each group by
    # num_ctx, as each change reloads the runner. The figures so far are written after every
    # chat, so a run cut short still tells what it saw.
    order = sorted(range(len(plan)), key=lambda i: (plan[i].long, plan[i].num_ctx))
    with tempfile.TemporaryDirectory() as home:
        proc, base = serve(binary, gguf, Path(home))
        try:
            turns: list[Turn] = []
            memory = Conversations()
            started = time.monotonic()
            for done, i in enumerate(order, 1):
                chat_turns = run_chat(base, i, plan[i])
                judge(chat_turns, memory)
                turns += chat_turns
                if args.json:
                    figures = {"chats_run": done, **report(turns)}
                    args.json.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
                if done % 10 == 0:
                    print(f"{done}/{len(plan)} chats, {time.monotonic() - started:.0f} s",
                          file=sys.stderr)  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(15)
    print(orjson.dumps(report(turns), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())

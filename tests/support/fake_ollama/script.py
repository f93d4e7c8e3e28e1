"""Scripted runs: what a test sets, and the native chunks a run yields for a route to shape."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tests.support.fake_ollama.gojson import go_time
from tests.support.fake_ollama.models import FakeModel

if TYPE_CHECKING:
    from tests.support.fake_ollama.context import Plan


@dataclass
class Script:
    """How the next generate/chat (native and /v1) replies behave.

    Embeddings use the delays and `status_error` too. Phases run in Ollama's order: load,
    queue (a parallel-slot wait no field reports), prefill, then one output chunk every
    `token_delay`. Output chunks are the thinking pieces, then the tokens, then (chat) one
    tool-call chunk.
    """

    tokens: list[str] = field(default_factory=lambda: ["The", " sky", " is", " blue", "."])
    thinking: list[str] = field(default_factory=list)
    load_delay: float = 0.0
    queue_delay: float = 0.0
    prefill_delay: float = 0.0
    token_delay: float = 0.0
    prompt_eval_count: int = 26
    prompt_eval_cached_count: int | None = None
    eval_count: int | None = None
    done_reason: str = "stop"
    error_after: int | None = None
    error_message: str = "an error was encountered while running the model"
    status_error: tuple[int, str] | None = None
    no_final: bool = False
    die_after: int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_calls_on_final: bool = False
    context: list[int] | None = None
    zero_fields: tuple[str, ...] = ()


@dataclass
class Chunk:
    """One native generate/chat object before a route shapes it."""

    created_at: str = ""
    content: str = ""
    thinking: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    done: bool = False
    done_reason: str = ""
    context: list[int] | None = None
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def has_output(self) -> bool:
        return bool(self.content or self.thinking or self.tool_calls)


@dataclass
class Error:
    """An error the runner reports; a status line if nothing was written yet, else a line."""

    message: str
    status: int = 500


class Die:
    """The connection is cut here."""


Event = Chunk | Error | Die


@dataclass
class Run:
    """One inference request as the pipeline needs it."""

    model: FakeModel
    start_ns: int
    keep_alive: float
    num_ctx: int | None
    think: bool
    chat: bool
    options: dict[str, Any] = field(default_factory=dict)
    shift: bool | None = None
    keep_alive_set: bool = False
    """Whether the request carried keep_alive (only then does it change a runner's)."""
    plan: Plan | None = None
    """The prompt under Ollama's context rules (context.py), when the engine follows them."""
    default_ctx: int = 4096
    """The context a request that leaves num_ctx unset gets (Modelfile, else the server's)."""


def shaped_tool_calls(calls: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scripted calls in the shape the current server sends (id, then function with index)."""
    shaped = []
    for index, call in enumerate(calls):
        function = call.get("function", call)
        shaped.append(
            {
                "id": call.get("id")
                or "call_" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=8)),
                "function": {
                    "index": index,
                    "name": function["name"],
                    "arguments": function.get("arguments", {}),
                },
            }
        )
    return shaped


def interruption(script: Script, count: int) -> Error | Die | None:
    """The cut or the error the script puts before output piece `count`, if any."""
    if script.die_after == count:
        return Die()
    if script.error_after == count:
        return Error(script.error_message)
    return None


def output_pieces(script: Script, run: Run) -> list[Chunk]:
    """A run's output chunks, untimed: thinking (when asked), tokens, then a chat's tool calls."""
    pieces = [Chunk(thinking=t) for t in script.thinking] if run.think else []
    pieces += [Chunk(content=t) for t in script.tokens]
    if script.tool_calls and run.chat and not script.tool_calls_on_final:
        pieces.append(Chunk(tool_calls=shaped_tool_calls(script.tool_calls)))
    return pieces


async def fold(events: AsyncIterator[Event]) -> Event:
    """What a non-streaming reply carries: the last chunk with the output concatenated."""
    content: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    last = Chunk(created_at=go_time(time.time_ns()))
    async for event in events:
        if not isinstance(event, Chunk):
            return event
        content.append(event.content)
        thinking.append(event.thinking)
        calls += event.tool_calls or []
        last = event
    return replace(
        last, content="".join(content), thinking="".join(thinking), tool_calls=calls or None
    )

"""The fake's state and its scripted inference, apart from HTTP: what every route family uses."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from tests.support.fake_ollama.context import (
    cloud_model,
    default_context,
    is_cloud,
    parse_version,
    plan,
)
from tests.support.fake_ollama.gojson import go_time
from tests.support.fake_ollama.models import FakeModel, LoadedModel, canonical_name, default_models
from tests.support.fake_ollama.replies import Refused
from tests.support.fake_ollama.scheduler import OOM_FLUSH, OOM_TEXTS, Scheduler
from tests.support.fake_ollama.script import (
    Chunk,
    Error,
    Event,
    Run,
    Script,
    interruption,
    output_pieces,
    shaped_tool_calls,
)
from tests.support.fake_ollama.slots import Slots

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "m": 60,
    "h": 3600,
}


def keep_alive_seconds(value: Any) -> float:
    """`keep_alive` as seconds (a number, or a Go duration string); negative means forever."""
    if value is None:
        return 300.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.lstrip("+-") == "0":
        seconds = 0.0
    elif (
        isinstance(value, str)
        and (parts := _DURATION_PART.findall(body := value.lstrip("+-")))
        and "".join(n + u for n, u in parts) == body
    ):
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
        seconds = -seconds if value.startswith("-") else seconds
    else:
        raise Refused(400, f'time: invalid duration "{value}"')
    return math.inf if seconds < 0 else seconds


class Engine:
    """The models, what is loaded, the blobs and the script: public, so tests can arrange
    and inspect them. Runs follow the script with real delays; no model runs."""

    version: str = "0.33.0-rc2"
    context_rules: bool = False
    """Count prompt tokens and truncate, refuse and shift as Ollama does (context.py);
    off, prompt_eval_count is the script's."""

    def __init__(self) -> None:
        self.script = Script()
        self.slots = Slots()
        """How many runs go at once (`slots.limit = 1`: one at a time, the rest wait)."""
        self.models: dict[str, FakeModel] = default_models()
        self.loaded: dict[str, LoadedModel] = {}
        self.blobs: dict[str, bytes] = {}
        self.scheduler: Scheduler | None = None
        """Ollama's scheduler rules (scheduler.py) when set; else a run just marks its model
        loaded."""
        self.default_keep_alive = 300.0
        """`OLLAMA_KEEP_ALIVE` (5 m)."""
        self.total_vram_gib = 8.0
        """The GPUs' total memory, which picks the default context from v0.15.5."""
        self.context_length_env = 0
        """`OLLAMA_CONTEXT_LENGTH` (0: automatic)."""
        self.unlisted: set[str] = set()
        """Installed models the lists (/api/tags, /v1/models) leave out but requests find:
        a list that lags, or a server that serves names it does not list."""

    def listed(self) -> list[FakeModel]:
        """The models the lists show, newest first, as Ollama orders them."""
        models = [m for m in self.models.values() if m.name not in self.unlisted]
        return sorted(models, key=lambda m: m.modified_at, reverse=True)

    def find(self, name: str) -> FakeModel | None:
        """The installed model a request names, matched case-insensitively as Ollama does."""
        wanted = canonical_name(name).lower()
        return next((m for k, m in self.models.items() if k.lower() == wanted), None)

    def require(self, name: Any, message: str) -> FakeModel:
        """The model `name` names, else a refusal with `message` (formatted with the name)."""
        if not name or not isinstance(name, str):
            raise Refused(400, "model is required")
        model = self.find(name)
        if model is None and is_cloud(name):
            return cloud_model(name)
        if model is None:
            raise Refused(404, message.format(name=name))
        return model

    def run(
        self, model: FakeModel, body: dict[str, Any], start_ns: int, *, think: bool, chat: bool
    ) -> Run:
        options: dict[str, Any] = body["options"] if isinstance(body.get("options"), dict) else {}
        num_ctx = options.get("num_ctx") if isinstance(options.get("num_ctx"), int) else None
        shift = body.get("shift") if isinstance(body.get("shift"), bool) else None
        run = Run(
            model, start_ns, keep_alive_seconds(body.get("keep_alive")), num_ctx, think, chat,
            options, shift, body.get("keep_alive") is not None,
        )  # fmt: skip
        version = parse_version(self.version)
        run.default_ctx = model.context_length or default_context(
            version, self.total_vram_gib, self.context_length_env
        )
        if self.context_rules:
            run.plan = plan(
                model, body, num_ctx, chat=chat, version=version, default=run.default_ctx
            )
        return run

    def mark_loaded(self, run: Run) -> None:
        if is_cloud(run.model.name):
            return  # proxied to ollama.com: no local runner
        if self.scheduler is not None:
            return  # the scheduler keeps `loaded`
        lifetime_ns = (1 << 63) - 1 if math.isinf(run.keep_alive) else int(run.keep_alive * 1e9)
        self.loaded[run.model.name] = LoadedModel(
            expires_at_ns=time.time_ns() + lifetime_ns,
            context_length=run.plan.context if run.plan else run.num_ctx or run.default_ctx,
        )

    async def produce(self, run: Run, *, context: bool) -> AsyncIterator[Event]:
        """The scripted reply with real phase timings; the final object measures them."""
        async with self.slots.hold():
            scheduler = self.scheduler
            if scheduler is None:
                async for event in self._produce(run, context=context):
                    yield event
                return
            await scheduler.acquire(run)
            try:
                async for event in self._produce(run, context=context):
                    if isinstance(event, Error) and self._flushes(event.message):
                        scheduler.flush_oom()
                    yield event
            finally:
                scheduler.release(run)

    def _flushes(self, message: str) -> bool:
        """Whether this error makes Ollama expire every runner (`IsOutOfMemoryMessage`)."""
        low = message.lower()
        return parse_version(self.version) >= OOM_FLUSH and any(t in low for t in OOM_TEXTS)

    async def _produce(self, run: Run, *, context: bool) -> AsyncIterator[Event]:
        script = self.script
        await asyncio.sleep(script.load_delay)
        loaded_ns = time.monotonic_ns()
        if script.status_error is not None:
            yield Error(script.status_error[1], script.status_error[0])
            return
        self.mark_loaded(run)
        if run.plan is not None and run.plan.refusal is not None:
            yield Error(run.plan.refusal[1], run.plan.refusal[0])
            return
        await asyncio.sleep(script.queue_delay)
        prefill_ns = time.monotonic_ns()
        await asyncio.sleep(script.prefill_delay)
        pieces = output_pieces(script, run)
        first_ns = last_ns = 0
        for count, piece in enumerate(pieces):
            if (stop := interruption(script, count)) is not None:
                yield stop
                return
            if count:
                await asyncio.sleep(script.token_delay)
            last_ns = time.monotonic_ns()
            first_ns = first_ns or last_ns
            yield replace(piece, created_at=go_time(time.time_ns()))
        if (stop := interruption(script, len(pieces))) is not None:
            yield stop
            return
        if script.no_final:
            return
        yield self._final(
            run, pieces, context=context, phases=(loaded_ns, prefill_ns, first_ns, last_ns)
        )
        if run.keep_alive == 0 and self.scheduler is None:
            self.loaded.pop(run.model.name, None)

    def _final(
        self, run: Run, pieces: list[Chunk], *, context: bool, phases: tuple[int, int, int, int]
    ) -> Chunk:
        script = self.script
        loaded_ns, prefill_ns, first_ns, last_ns = phases
        final_ns = time.monotonic_ns()
        on_final = bool(script.tool_calls) and (script.tool_calls_on_final or not run.chat)
        eval_count = script.eval_count if script.eval_count is not None else len(pieces) + on_final
        prompt_count, full, done_reason = script.prompt_eval_count, None, script.done_reason
        if (p := run.plan) is not None:
            eval_count, cut = p.output(eval_count)
            prompt_count, full = p.kept, p.full
            done_reason = "length" if cut else done_reason
        metrics = {
            "total_duration": final_ns - run.start_ns,
            "load_duration": loaded_ns - run.start_ns,
            "prompt_eval_count": prompt_count,
            "prompt_eval_cached_count": script.prompt_eval_cached_count,
            "prompt_eval_duration": (first_ns or final_ns) - prefill_ns,
            "eval_count": eval_count,
            "eval_duration": last_ns - first_ns,
        }
        kept = {
            k: v
            for k, v in metrics.items()
            if v is not None
            and k not in script.zero_fields
            and (v != 0 or k == "prompt_eval_cached_count")
        }
        ids = (
            script.context
            if script.context is not None
            else list(range(1, (prompt_count if full is None else full) + eval_count + 1))
        )
        calls = shaped_tool_calls(script.tool_calls) if on_final and script.tool_calls else None
        return Chunk(
            created_at=go_time(time.time_ns()),
            done=True,
            done_reason=done_reason,
            tool_calls=calls,
            context=ids if context else None,
            metrics=kept,
        )

    async def embed_phases(self, run: Run) -> int:
        """Load, queue and compute delays for an embedding; returns when the load ended."""
        script = self.script
        await asyncio.sleep(script.load_delay)
        loaded_ns = time.monotonic_ns()
        if script.status_error is not None:
            raise Refused(*script.status_error)
        self.mark_loaded(run)
        await asyncio.sleep(script.queue_delay + script.prefill_delay)
        return loaded_ns

    def compat_run(
        self, body: dict[str, Any], start_ns: int, *, think: bool, chat: bool
    ) -> tuple[str, Run]:
        name = str(body.get("model") or "")
        model = self.require(name, "model '{name}' not found")
        return name, self.run(model, compat_body(body), start_ns, think=think, chat=chat)


IGNORED_ON_V1 = ("options", "keep_alive", "shift", "truncate")
"""Fields a /v1 body may carry that Ollama never reads there: the compat request structs
have none of them (`openai/openai.go` `ChatCompletionRequest`, `CompletionRequest`,
`EmbedRequest`; `openai/responses.go`; `anthropic/anthropic.go` maps only max_tokens,
temperature, top_p, top_k and stop), so the native request it builds leaves them unset
(F§1 #4; every version with /v1)."""


def compat_body(body: dict[str, Any]) -> dict[str, Any]:
    """A /v1 body as the native request the middleware builds from it: the fields above
    dropped, a Responses `input` (and `instructions`) turned into messages."""
    out = {k: v for k, v in body.items() if k not in IGNORED_ON_V1}
    if "input" in body and "messages" not in body:
        items = body["input"] if isinstance(body["input"], list) else [body["input"]]
        out["messages"] = [
            {"role": "user", "content": item} if isinstance(item, str) else item for item in items
        ]
        if isinstance(body.get("instructions"), str):
            out["system"] = body["instructions"]
    return out


Handler = Callable[[Engine, web.Request], Awaitable[web.StreamResponse]]
Route = tuple[str, str, Handler]
"""Methods (space-separated), path, handler."""

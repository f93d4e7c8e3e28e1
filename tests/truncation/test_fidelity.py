"""The truncation rules against Ollama's source where ollama-fidelity.md §1 found them wrong
(the numbers are that table's): through the proxy against the fake, which follows the
source for each, and as pure functions for each version boundary."""

from __future__ import annotations

from typing import Any

import aiohttp
import ollama
import openai
import orjson
import pytest
from prometheus_client import CollectorRegistry

from ollama_tap.app import POLLER
from ollama_tap.exchange import Exchange, Outcome, RequestFields, Usage
from ollama_tap.facts import ModelFacts, Standing, TruncationKind
from ollama_tap.names import ModelLabels
from ollama_tap.ollama.version import parse_version
from ollama_tap.truncation.context import Runtime, slot_context
from ollama_tap.truncation.observer import TruncationObserver
from ollama_tap.truncation.rules import judge
from tests.conftest import Proxy
from tests.support.exchanges import new_exchange
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.context import shift_limit
from tests.support.fake_ollama.models import model_details, new_model
from tests.support.fake_ollama.scheduler import Scheduler
from tests.support.metrics import LLAMA, counter, settled
from tests.support.records import records
from tests.support.waiting import eventually

NOW = (0, 33, 0)


@pytest.fixture
def fake(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.context_rules = True
    return fake_ollama


def words(n: int) -> str:
    return " ".join(["w"] * n)


def verdicts(proxy: Proxy) -> float | None:
    return proxy.sample("ollama_tap_truncations_total")


async def only_verdict(proxy: Proxy, want: int) -> dict[str, Any] | None:
    """The newest verdict once `want` records are written; None when none has one."""
    await settled(proxy)
    found = [r["truncation"] for r in await records(proxy, want, limit="100")]
    return next((v for v in found if v), None)


async def context_read(proxy: Proxy, model: str, c: int) -> None:
    await eventually(lambda: proxy.sample("ollama_tap_model_context_length", {"model": model}) == c)


def finished(endpoint: str = "/api/chat", *, p: int, e: int = 5, **fields: Any) -> Exchange:
    body = fields.pop("body", None)
    options = fields.pop("options", None)
    ex = new_exchange(endpoint, status=200, outcome=Outcome.OK, done_reason="stop", **fields)
    ex.usage = Usage(prompt_eval_count=p, eval_count=e)
    ex.request = RequestFields(options=options, parsed=True)
    ex.request_body = orjson.dumps(body) if body is not None else None
    return ex


async def test_2_a_reload_to_the_default_context_is_not_judged_by_the_old_row(
    proxy: Proxy, fake: FakeOllama
) -> None:
    """Client A loads num_ctx 2048; client B leaves it unset, so Ollama reloads to the
    default 4096. /api/ps still says 2048 when B's reply is judged: no context shift."""
    fake.scheduler = Scheduler(fake, load_seconds=0.05)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate(LLAMA, "hi", options={"num_ctx": 2048})
    await context_read(proxy, LLAMA, 2048)
    fake.script = Script(eval_count=100)
    reply = await client.chat(LLAMA, [{"role": "user", "content": words(2000)}])
    assert reply.prompt_eval_count + reply.eval_count > 2048
    assert fake.scheduler.options_of(LLAMA) == {"num_ctx": 4096, "shift": True}
    assert await only_verdict(proxy, 2) is None


async def test_3_a_context_not_a_multiple_of_256_runs_in_a_padded_slot(
    proxy: Proxy, fake: FakeOllama
) -> None:
    deepseek = new_model("deepseek-v2:latest")
    deepseek.details = model_details("deepseek2", "16B", "Q4_0")
    fake.models[deepseek.name] = deepseek
    client = ollama.AsyncClient(host=proxy.url)
    fake.script = Script(eval_count=1050)
    # 2000 + 1050 = 3050 ≤ 3072: llama-server never shifted.
    await client.generate(LLAMA, words(2000), options={"num_ctx": 3000})
    assert await only_verdict(proxy, 1) is None
    fake.script = Script(eval_count=3000)
    cut = await client.generate("deepseek-v2", words(2000), options={"num_ctx": 3000})
    assert cut.done_reason == "length"
    verdict = await only_verdict(proxy, 2)
    assert verdict is not None and (verdict["kind"], verdict["rule"]) == ("output_cut", "T8")


async def test_4_v1_options_are_not_the_context(proxy: Proxy, fake: FakeOllama) -> None:
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate(LLAMA, "hi")
    await context_read(proxy, LLAMA, 4096)
    fake.script = Script(eval_count=100)
    oai = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="ollama")
    done = await oai.chat.completions.create(
        model=LLAMA,
        messages=[{"role": "user", "content": words(1500)}],
        extra_body={"options": {"num_ctx": 1024}},
    )
    assert done.usage is not None and done.usage.prompt_tokens == 1504
    assert await only_verdict(proxy, 2) is None
    assert counter(proxy, "reload_predicted_total", model=LLAMA, field="num_ctx") is None


async def test_5_an_mlx_models_soft_context_is_not_judged(proxy: Proxy, fake: FakeOllama) -> None:
    mlx = new_model("mlx-model:latest")
    mlx.details = {**model_details("llama", "1B", "bf16"), "format": "safetensors"}
    fake.models[mlx.name] = mlx
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("mlx-model", "hi", options={"num_ctx": 2048})
    await context_read(proxy, "mlx-model:latest", 2048)
    fake.script = Script(eval_count=100)
    reply = await client.generate("mlx-model", words(3000), options={"num_ctx": 2048})
    assert reply.prompt_eval_count == 3000
    assert await only_verdict(proxy, 2) is None


async def test_7_an_embedding_cut_to_the_batch_is_flagged(proxy: Proxy, fake: FakeOllama) -> None:
    bge = new_model("bge-m3:latest")
    bge.capabilities = ["embedding"]
    bge.model_info = {"general.architecture": "bert", "bert.context_length": 8192}
    bge.context_length = 8192
    fake.models[bge.name] = bge
    reply = await ollama.AsyncClient(host=proxy.url).embed(
        "bge-m3", words(3000), options={"num_ctx": 8192}
    )
    assert reply.prompt_eval_count == 2048
    verdict = await only_verdict(proxy, 1)
    assert verdict is not None and (verdict["kind"], verdict["context"]) == (
        "embed_truncated",
        8192,
    )
    assert "the embedding batch, num_batch 2,048" in verdict["explanation"]


async def test_8_an_old_versions_small_cut_is_a_truncation_not_a_shift(
    proxy: Proxy, fake: FakeOllama
) -> None:
    fake.version = "0.30.5"
    await eventually(lambda: proxy.app[POLLER].version == "0.30.5")
    reply = await ollama.AsyncClient(host=proxy.url).generate(
        LLAMA, words(4200), options={"num_ctx": 4096}
    )
    assert reply.prompt_eval_count == 4095
    verdict = await only_verdict(proxy, 1)
    assert verdict is not None and (verdict["rule"], verdict["tokens_lost"]) == ("T2", 105)


async def test_9_a_vision_models_floor_is_its_context(proxy: Proxy, fake: FakeOllama) -> None:
    llava = new_model("llava:latest")
    llava.capabilities = ["completion", "vision"]
    fake.models[llava.name] = llava
    await eventually(lambda: proxy.app[POLLER].standing("llava").facts.vision)
    client = ollama.AsyncClient(host=proxy.url)
    await client.generate("llava", "hi", options={"num_ctx": 1024})
    await context_read(proxy, "llava:latest", 2048)
    fake.script = Script(eval_count=100)
    await client.generate("llava", words(1500), options={"num_ctx": 1024})
    assert await only_verdict(proxy, 2) is None


async def test_13_the_legacy_embeddings_500_is_a_refusal(proxy: Proxy, fake: FakeOllama) -> None:
    async with aiohttp.ClientSession() as s:
        body = {"model": "all-minilm", "prompt": words(600)}
        async with s.post(f"{proxy.url}/api/embeddings", json=body) as resp:
            assert resp.status == 500
    verdict = await only_verdict(proxy, 1)
    assert verdict is not None and (verdict["kind"], verdict["rule"]) == ("refused", "T3")


def test_1_dropped_messages_are_not_reported() -> None:
    """Stage 1 leaves P ≤ C and answers 200: no rule on one request can tell it from a
    short chat without the prompt's token count. T5 needs the conversation's previous
    request (test_history.py)."""
    dropped = finished(p=104 + 3 * 1004, body={"messages": [{}] * 7})
    assert judge(dropped, Runtime(4096, NOW)) is None


@pytest.mark.parametrize(
    ("c", "version", "slot"),
    [(3000, NOW, 3072), (4096, NOW, 4096), (3000, (0, 30, 0), 3072), (3000, (0, 24, 0), 3000)],
)
def test_3_the_slot_by_version(c: int, version: tuple[int, int, int], slot: int) -> None:
    assert slot_context(c, None, version) == slot
    assert slot_context(c, 3010, version) == min(slot, max(3010, c)), "capped at train"
    shifted = judge(finished(p=2000, e=slot - 2000 + 1), Runtime(c, version))
    assert shifted is not None and shifted.rule == "T7"
    assert judge(finished(p=2000, e=slot - 2000), Runtime(c, version)) is None


def test_4_num_keep_and_num_predict_of_a_v1_body_are_not_read() -> None:
    keep = finished("/v1/chat/completions", p=shift_limit(4096, 4), options={"num_keep": 100})
    assert judge(keep, Runtime(4096, NOW)) is not None, "num_keep 4, Ollama's default"
    capped = finished(
        "/v1/chat/completions", p=3000, e=1096, body={"options": {"num_predict": 1096}}
    )
    capped.done_reason = "length"
    verdict = judge(capped, Runtime(4096, NOW))
    assert verdict is not None and verdict.rule == "T8"


def test_5_a_soft_context_takes_refusals_only() -> None:
    assert judge(finished(p=3000, e=100), Runtime(2048, NOW, soft=True)) is None
    refused = new_exchange(
        "/api/chat", status=400, error_message="input length (9000 tokens) exceeds the "
        "model's maximum context length (8192 tokens)",
    )  # fmt: skip
    assert judge(refused, Runtime(2048, NOW, soft=True)) is not None


@pytest.mark.parametrize(
    ("version", "batch"), [((0, 24, 0), None), ((0, 30, 0), 2048), (NOW, 2048)]
)
def test_7_the_embedding_batch_by_version(version: tuple[int, int, int], batch: int | None) -> None:
    cut = finished("/api/embed", p=2048, e=0, body={"input": "long"})
    verdict = judge(cut, Runtime(8192, version))
    assert (verdict is not None) is (batch is not None)
    asked = finished("/api/embed", p=2048, e=0, body={"input": "x"}, options={"num_batch": 4096})
    assert judge(asked, Runtime(8192, version)) is None


@pytest.mark.parametrize(
    ("version", "p", "lost", "rule"),
    [
        ((0, 24, 0), 4096, 40, "T2"),  # the Go runners keep C
        ((0, 30, 5), 4095, 40, "T2"),  # llama-server, C − 1
        ((0, 30, 5), 3000, 40, None),  # not at the length a cut leaves
        ((0, 30, 11), 3000, 40, None),  # from 0.30.11 a cut drops ≈ C/2
        ((0, 30, 11), 2050, 3050, "T2"),
    ],
)
def test_8_t2_by_version(
    version: tuple[int, int, int], p: int, lost: int, rule: str | None
) -> None:
    ex = finished("/api/generate", p=p, final={"context": list(range(p + 5 + lost))})
    verdict = judge(ex, Runtime(4096, version))
    assert (verdict.rule if verdict else None) == rule


@pytest.mark.parametrize(
    ("p", "whole", "rule"),
    [
        (4095, 4135, "T2"),  # a cut to C − 1, nothing cached: 40 lost
        (6, 4135, "T2"),  # the same prompt again, its front found in llama-server's cache
        (5, 1700, None),  # a prompt that fit, its front cached: the gap is no loss
        (1700, 1700, None),
    ],
)
def test_t2_on_0_30_0_whose_prompt_count_leaves_out_the_cache(
    p: int, whole: int, rule: str | None
) -> None:
    """Measured on the real v0.30.0 (tests/ollama_real/test_truncation.py): a repeated
    170-token prompt reported prompt_eval_count 5, and T2 read its 165 cached tokens as lost.
    The count is the cut's, C − 1, whatever was cached; from v0.30.1 P is whole again."""
    ex = finished("/api/generate", p=p, final={"context": list(range(whole + 5))})
    verdict = judge(ex, Runtime(4096, (0, 30, 0)))
    assert (verdict.rule if verdict else None) == rule
    if verdict is not None:
        assert (verdict.tokens_lost, verdict.prompt_tokens) == (whole - 4095, 4095)
    assert judge(ex, Runtime(None, (0, 30, 0))) is None  # without C, P tells nothing
    cached = finished("/api/generate", p=5, final={"context": list(range(1700 + 5))})
    assert judge(cached, Runtime(4096, (0, 30, 1))) is not None  # P whole again: 5 is a cut


def test_11_a_source_build_runs_the_current_rules() -> None:
    version = parse_version("0.0.0")
    assert version is None
    verdict = judge(finished(p=shift_limit(4096, 4)), Runtime(4096, version))
    assert verdict is not None and verdict.rule == "T1"


@pytest.mark.parametrize(
    ("endpoint", "status", "message"),
    [
        ("/api/embeddings", 500, "the input length exceeds the context length"),
        ("/api/chat", 500, 'llama-server chat error: map[code:400 message:request (5000 tokens) '
         "exceeds the available context size (4096 tokens), try increasing it "
         "type:exceed_context_size_error]"),
        ("/api/chat", 200, "exceed_context_size_error"),  # a mid-stream error line
    ],
)  # fmt: skip
def test_13_refusals_whatever_the_status(endpoint: str, status: int, message: str) -> None:
    ex = new_exchange(endpoint, status=status, error_message=message)
    verdict = judge(ex, Runtime(None, NOW))
    assert verdict is not None and verdict.kind is TruncationKind.REFUSED


def test_14_responses_length_stops_are_not_told() -> None:
    """`/v1/responses` says "completed" even on a length stop: T8 cannot fire there; T7,
    which needs no stop reason, still does."""
    filled = finished("/v1/responses", p=3000, e=1096)
    filled.done_reason = "completed"
    assert judge(filled, Runtime(4096, NOW)) is None
    over = finished("/v1/responses", p=3000, e=1200)
    verdict = judge(over, Runtime(4096, NOW))
    assert verdict is not None and verdict.rule == "T7"


async def test_a_modelfile_num_keep_enters_the_truncated_length(
    proxy: Proxy, fake: FakeOllama
) -> None:
    kept = new_model("keeper:latest")
    kept.parameters = "num_keep                       64"
    fake.models[kept.name] = kept
    await eventually(lambda: proxy.app[POLLER].standing("keeper").facts.num_keep == 64)
    reply = await ollama.AsyncClient(host=proxy.url).chat(
        "keeper", [{"role": "user", "content": words(6000)}], options={"num_ctx": 4096}
    )
    assert reply.prompt_eval_count == shift_limit(4096, 64)
    verdict = await only_verdict(proxy, 1)
    assert verdict is not None and verdict["rule"] == "T1"


def test_a_modelfile_num_ctx_is_the_context_a_request_without_one_gets() -> None:
    """`modelOptions` applies the Modelfile's PARAMETERs under the request's options: a
    request that leaves num_ctx unset runs with the Modelfile's, and one that sets it, its
    own. Before /api/ps lists the runner, that is C."""

    class Shown:
        def standing(self, model: str | None) -> Standing:
            facts = ModelFacts("llama", 131072, False, None, (("num_ctx", 2048),), "FROM x")
            return Standing("d-a", facts, "0.33.0")

        def loaded(self, model: str | None) -> None:
            return None

    observer = TruncationObserver(CollectorRegistry(), ModelLabels(10), Shown())
    unset, own = finished(p=10), finished(p=10, options={"num_ctx": 4096})
    assert observer.runtime(unset).context == 2048
    assert observer.runtime(own).context == 4096

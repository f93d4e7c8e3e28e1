"""The fake follows Ollama's source where ollama-fidelity.md §1 found it did not: one test
per disagreement the fake can show (the numbers are that table's), and one per version
boundary. Requests go straight to the fake; the proxy's verdicts on the same behaviour
are tests/truncation/test_fidelity.py and tests/loads/test_fidelity.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from ollama_tap.ollama.state import go_time as go_seconds
from tests.support.fake_ollama import FakeOllama, Script
from tests.support.fake_ollama.context import shift_limit
from tests.support.fake_ollama.models import model_details, new_model
from tests.support.fake_ollama.scheduler import Scheduler

LLAMA = "llama3.2:latest"


@pytest.fixture
def fake(fake_ollama: FakeOllama) -> FakeOllama:
    fake_ollama.context_rules = True
    return fake_ollama


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as s:
        yield s


def words(n: int) -> str:
    return " ".join(["w"] * n)


async def post(
    session: aiohttp.ClientSession, fake: FakeOllama, path: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    async with session.post(fake.url + path, json={"stream": False, **body}) as resp:
        return resp.status, await resp.json()


async def ps(session: aiohttp.ClientSession, fake: FakeOllama) -> dict[str, dict[str, Any]]:
    async with session.get(fake.url + "/api/ps") as resp:
        return {m["name"]: m for m in (await resp.json())["models"]}


async def test_1_chat_drops_whole_old_messages_and_answers_200(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    """Stage 1 (`server/prompt.go` chatPrompt): the history is cut at a message boundary,
    the system message and the last message stay, and nothing says so."""
    messages = [{"role": "system", "content": words(100)}]
    messages += [{"role": "user", "content": words(1000)} for _ in range(6)]
    status, reply = await post(
        session, fake, "/api/chat", model=LLAMA, messages=messages, options={"num_ctx": 4096}
    )
    assert status == 200
    # system + the last three turns (104 + 3 × 1004 = 3116) fit 4096; four do not.
    assert reply["prompt_eval_count"] == 104 + 3 * 1004
    assert reply["prompt_eval_count"] != shift_limit(4096, 4)
    # truncate:false turns stage 1 off: the whole history goes to llama-server, refused.
    status, _ = await post(
        session, fake, "/api/chat", model=LLAMA, messages=messages, truncate=False,
        options={"num_ctx": 4096},
    )  # fmt: skip
    assert status == 400


async def test_3_the_slot_is_padded_to_256(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    """llama.cpp pads the per-slot context: num_ctx 3000 runs in 3072 tokens, so shift-off
    output stops at P + E = 3072, and truncate:false refuses only past 3072."""
    deepseek = new_model("deepseek-v2:latest")
    deepseek.details = model_details("deepseek2", "16B", "Q4_0")
    fake.models[deepseek.name] = deepseek
    fake.script = Script(eval_count=3000)
    _, reply = await post(
        session, fake, "/api/generate", model="deepseek-v2", prompt=words(2000),
        options={"num_ctx": 3000},
    )  # fmt: skip
    assert reply["done_reason"] == "length"
    assert reply["prompt_eval_count"] + reply["eval_count"] == 3072
    status, _ = await post(
        session, fake, "/api/generate", model=LLAMA, prompt=words(3050), truncate=False,
        options={"num_ctx": 3000},
    )  # fmt: skip
    assert status == 200, "3050 tokens fit the 3072 slot"
    status, refused = await post(
        session, fake, "/api/generate", model=LLAMA, prompt=words(3100), truncate=False,
        options={"num_ctx": 3000},
    )  # fmt: skip
    assert status == 400 and '"n_ctx":3072' in refused["error"]


async def test_4_v1_bodies_options_keep_alive_shift_truncate_are_ignored(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    body = {
        "model": LLAMA,
        "messages": [{"role": "user", "content": words(2000)}],
        "options": {"num_ctx": 1024},
        "keep_alive": 0,
        "truncate": False,
        "shift": False,
    }
    status, reply = await post(session, fake, "/v1/chat/completions", **body)
    assert status == 200
    assert reply["usage"]["prompt_tokens"] == 2004, "not cut to num_ctx 1024"
    loaded = await ps(session, fake)
    assert loaded[LLAMA]["context_length"] == 4096, "the default context, still loaded"


async def test_5_an_mlx_models_context_is_soft(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    mlx = new_model("mlx-model:latest")
    mlx.details = {**model_details("llama", "1B", "bf16"), "format": "safetensors"}
    fake.models[mlx.name] = mlx
    fake.script = Script(eval_count=500)
    status, reply = await post(
        session, fake, "/api/generate", model="mlx-model", prompt=words(3000),
        options={"num_ctx": 2048},
    )  # fmt: skip
    assert status == 200 and reply["prompt_eval_count"] == 3000
    assert (await ps(session, fake))["mlx-model:latest"]["context_length"] == 2048
    status, refused = await post(
        session, fake, "/api/generate", model="mlx-model", prompt=words(9000)
    )
    assert status == 400
    assert refused["error"] == (
        "input length (9000 tokens) exceeds the model's maximum context length (8192 tokens)"
    )


async def test_6_a_busy_runner_keeps_its_stale_expiry(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    """`useLoadedRunner` stops the timer and leaves `expiresAt`: while a request runs past
    keep_alive, /api/ps shows an expiry in the past, and the runner stays."""
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    await post(session, fake, "/api/generate", model=LLAMA, prompt="hi", keep_alive="1s")
    first = go_seconds((await ps(session, fake))[LLAMA]["expires_at"])
    fake.script = Script(tokens=["t"] * 16, token_delay=0.1)
    slow = asyncio.create_task(post(session, fake, "/api/generate", model=LLAMA, prompt="hi"))
    await asyncio.sleep(1.3)
    busy = (await ps(session, fake))[LLAMA]
    assert go_seconds(busy["expires_at"]) == first < time.time()
    await slow
    after = go_seconds((await ps(session, fake))[LLAMA]["expires_at"])
    assert after > time.time(), "refCount 0 set a new expiry"


async def test_7_an_embedding_over_the_batch_is_cut_to_the_batch(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    bge = new_model("bge-m3:latest")
    bge.capabilities = ["embedding"]
    bge.model_info = {"general.architecture": "bert", "bert.context_length": 8192}
    bge.context_length = 8192
    fake.models[bge.name] = bge
    _, reply = await post(
        session, fake, "/api/embed", model="bge-m3", input=words(3000), options={"num_ctx": 8192}
    )
    assert reply["prompt_eval_count"] == 2048
    _, asked = await post(
        session, fake, "/api/embed", model="bge-m3", input=words(3000),
        options={"num_ctx": 8192, "num_batch": 4096},
    )  # fmt: skip
    assert asked["prompt_eval_count"] == 3002


@pytest.mark.parametrize(
    ("version", "kept"),
    [
        ("0.24.0", 4096),  # the Go runners keep the last C
        ("0.30.0", 4095),  # llama-server, C − 1
        ("0.30.10", 4095),
        ("0.30.11", shift_limit(4096, 4)),  # L(C,k)
        ("0.0.0", shift_limit(4096, 4)),  # a source build runs the newest code (#11)
    ],
)
async def test_8_11_truncation_by_version(
    fake: FakeOllama, session: aiohttp.ClientSession, version: str, kept: int
) -> None:
    fake.version = version
    _, reply = await post(
        session, fake, "/api/generate", model=LLAMA, prompt=words(5000), options={"num_ctx": 4096}
    )
    assert reply["prompt_eval_count"] == kept
    assert len(reply["context"]) == 5000 + reply["eval_count"]


@pytest.mark.parametrize(("version", "refused"), [("0.30.8", False), ("0.30.9", True)])
async def test_the_shift_off_sentence_starts_at_0_30_9(
    fake: FakeOllama, session: aiohttp.ClientSession, version: str, refused: bool
) -> None:
    fake.version = version
    status, _ = await post(
        session, fake, "/api/generate", model=LLAMA, prompt=words(5000), shift=False,
        options={"num_ctx": 4096},
    )  # fmt: skip
    assert (status == 400) is refused


async def test_9_a_vision_models_context_is_at_least_2048(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    vision = new_model("llava:latest")
    vision.capabilities = ["completion", "vision"]
    fake.models[vision.name] = vision
    await post(
        session, fake, "/api/generate", model="llava", prompt="hi", options={"num_ctx": 1024}
    )
    assert (await ps(session, fake))["llava:latest"]["context_length"] == 2048
    await post(
        session, fake, "/api/generate", model="llava", prompt="hi", options={"num_ctx": 2048}
    )
    assert fake.scheduler.loads == ["llava:latest"], "1024 and 2048 are one runner"


async def test_10_the_equalities_needs_reload_grants(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = fake.scheduler = Scheduler(fake, load_seconds=0.01)
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x", options={"num_batch": 512})
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x")  # unset = 512
    assert sched.loads == [LLAMA]
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x", options={"use_mmap": False})
    assert len(sched.loads) == 2
    # An explicit use_mmap runner against a request that leaves it unset: reloaded.
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    assert len(sched.loads) == 3
    # The fake's automatic runner chose mmap: an explicit true matches it.
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x", options={"use_mmap": True})
    assert len(sched.loads) == 3


@pytest.mark.parametrize(("version", "flushed"), [("0.24.0", False), ("0.30.0", True)])
async def test_12_an_out_of_memory_error_flushes_every_runner(
    fake: FakeOllama, session: aiohttp.ClientSession, version: str, flushed: bool
) -> None:
    fake.version = version
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    await post(session, fake, "/api/generate", model="qwen3:8b", prompt="x")
    fake.script = Script(status_error=(500, "vk_error_out_of_device_memory"))
    status, _ = await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    assert status == 500
    assert (set(await ps(session, fake)) == set()) is flushed


async def test_13_the_legacy_embeddings_route_answers_500(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    status, reply = await post(
        session, fake, "/api/embeddings", model="all-minilm", prompt=words(600)
    )
    assert (status, reply) == (500, {"error": "the input length exceeds the context length"})


async def test_14_responses_say_completed_even_when_cut(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    """`openai/responses.go:985-986`: status "completed" and no incomplete_details, even
    on a length stop, so no reply field tells a cut on /v1/responses."""
    deepseek = new_model("deepseek-v2:latest")
    deepseek.details = model_details("deepseek2", "16B", "Q4_0")
    fake.models[deepseek.name] = deepseek
    fake.script = Script(eval_count=3000)
    _, reply = await post(session, fake, "/v1/responses", model="deepseek-v2", input=words(2000))
    assert (reply["status"], reply["incomplete_details"]) == ("completed", None)
    assert reply["usage"]["input_tokens"] + reply["usage"]["output_tokens"] == 4096


async def test_15_keep_alive_zero_waits_for_the_requests_in_flight(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    """`processCompleted` unloads at refCount 0 only; a later request carrying keep_alive
    overwrites the 0 (`useLoadedRunner`)."""
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    fake.script = Script(tokens=["t"] * 5, token_delay=0.1)
    slow = asyncio.create_task(post(session, fake, "/api/generate", model=LLAMA, prompt="x"))
    await asyncio.sleep(0.1)
    fake.script = Script()
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x", keep_alive=0)
    assert LLAMA in await ps(session, fake), "still busy"
    await slow
    assert await ps(session, fake) == {}


async def test_16_names_on_one_blob_share_a_runner(
    fake: FakeOllama, session: aiohttp.ClientSession
) -> None:
    sched = fake.scheduler = Scheduler(fake, load_seconds=0.01)
    variant = new_model("llama-variant:latest")
    variant.blob = fake.models[LLAMA].blob  # a Modelfile FROM llama3.2 with a new SYSTEM
    fake.models[variant.name] = variant
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    await post(session, fake, "/api/generate", model="llama-variant", prompt="x")
    assert sched.loads == [LLAMA]
    assert set(await ps(session, fake)) == {LLAMA}, "listed under the loader's name"


@pytest.mark.parametrize(
    ("version", "vram", "env", "context"),
    [
        ("0.6.6", 48.0, 0, 2048),
        ("0.6.7", 48.0, 0, 4096),
        ("0.15.4", 48.0, 0, 4096),
        ("0.15.5", 16.0, 0, 4096),  # the VRAM tiers start here
        ("0.15.5", 24.0, 0, 32768),
        ("0.15.5", 48.0, 0, 40960),  # 262144, capped at qwen3's training context
        ("0.33.0", 48.0, 8192, 8192),  # OLLAMA_CONTEXT_LENGTH
    ],
)
async def test_the_default_context_by_version_and_vram(
    fake: FakeOllama, session: aiohttp.ClientSession, version: str, vram: float, env: int,
    context: int,
) -> None:  # fmt: skip
    fake.version, fake.total_vram_gib, fake.context_length_env = version, vram, env
    fake.scheduler = Scheduler(fake, load_seconds=0.01)
    await post(session, fake, "/api/generate", model="qwen3:8b", prompt="x")
    assert (await ps(session, fake))["qwen3:8b"]["context_length"] == context


@pytest.mark.parametrize(("version", "reduced"), [("0.24.0", None), ("0.30.0", 4096)])
async def test_an_automatic_context_that_does_not_fit_is_retried_smaller(
    fake: FakeOllama, session: aiohttp.ClientSession, version: str, reduced: int | None
) -> None:
    fake.version, fake.total_vram_gib = version, 48.0
    sched = fake.scheduler = Scheduler(fake, load_seconds=0.01)
    sched.context_fits = 20000
    status, reply = await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    if reduced is None:
        assert status == 500 and "out of memory" in reply["error"]
        return
    assert status == 200
    assert (await ps(session, fake))[LLAMA]["context_length"] == reduced
    # Another request that leaves num_ctx unset: both automatic, the same runner.
    await post(session, fake, "/api/generate", model=LLAMA, prompt="x")
    assert sched.loads == [LLAMA]
    status, _ = await post(
        session, fake, "/api/generate", model=LLAMA, prompt="x", options={"num_ctx": 65536}
    )
    assert status == 500, "an explicit context is not reduced"

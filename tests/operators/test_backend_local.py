"""The in-process `local` backend, exercised with the real transformers path on the tiny random Qwen3."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import (
    BackendError,
    ChatBackend,
    ChatMessage,
    ChatRequest,
    DrawSettings,
    SamplingParams,
    SupportsCompleteMany,
)
from operators.backends.local import LocalBackend
from operators.models import prepare
from operators.registry import default_registry


@pytest.fixture(scope="module")
def tiny_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("models")
    prepare("tiny-qwen3", home=home)
    return home


@pytest.fixture
async def backend(tiny_home: Path) -> AsyncIterator[LocalBackend]:
    local = LocalBackend("tiny-qwen3", home=tiny_home, dtype="float32")
    yield local
    await local.aclose()


def ask(content: str, **sampling: object) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content=content)],
        sampling=SamplingParams.model_validate(sampling),
    )


def reference_greedy(folder: Path, request: ChatRequest, max_new_tokens: int) -> tuple[int, list[int], str]:
    """What plain transformers produces for the same chat (prompt length, new token ids, decoded text)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    text: Any = tokenizer.apply_chat_template(
        [m.model_dump() for m in request.messages], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    new: list[int] = out[0, ids.shape[1] :].tolist()
    stops = set(model.generation_config.eos_token_id)
    end = next((i for i, t in enumerate(new) if t in stops), len(new))
    kept = new[: end + 1] if end < len(new) else new
    return int(ids.shape[1]), kept, str(tokenizer.decode(new[:end], skip_special_tokens=True))


async def test_is_a_chat_backend_with_a_stable_cache_key(backend: LocalBackend, tiny_home: Path) -> None:
    assert isinstance(backend, ChatBackend)
    assert backend.model == "tiny-qwen3"
    key = backend.cache_key()
    assert key.startswith("local:tiny-qwen3:") and ":float32:" in key
    assert key == LocalBackend("tiny-qwen3", home=tiny_home, dtype="float32").cache_key()
    assert key != LocalBackend("tiny-qwen3", home=tiny_home, dtype="bfloat16").cache_key()
    other_defaults = LocalBackend(
        "tiny-qwen3", home=tiny_home, dtype="float32", defaults=SamplingParams(temperature=0.7)
    )
    assert key != other_defaults.cache_key()


async def test_matches_plain_transformers_greedy_and_counts_tokens(backend: LocalBackend, tiny_home: Path) -> None:
    request = ask("What is 2 + 2?", max_tokens=24)
    reply = await backend.complete(request)
    prompt_len, new_ids, text = reference_greedy(tiny_home / "tiny-qwen3", request, 24)
    assert reply.text == text
    assert reply.usage.prompt_tokens == prompt_len
    assert reply.usage.completion_tokens == len(new_ids)
    assert reply.model == "tiny-qwen3"
    assert reply.finish_reason in {"stop", "length"}
    assert reply.latency_s > 0


async def test_greedy_is_deterministic_and_prompt_dependent(backend: LocalBackend) -> None:
    first = await backend.complete(ask("Name a river.", max_tokens=16))
    second = await backend.complete(ask("Name a river.", max_tokens=16))
    other = await backend.complete(ask("Write code to add two numbers.", max_tokens=16))
    assert first.text == second.text and first.usage == second.usage
    assert other.text != first.text


async def test_max_tokens_is_honoured(backend: LocalBackend) -> None:
    for limit in (1, 5, 17):
        reply = await backend.complete(ask("Tell me a long story about mountains.", max_tokens=limit))
        assert 1 <= reply.usage.completion_tokens <= limit
        if reply.finish_reason == "length":
            assert reply.usage.completion_tokens == limit


async def test_stop_strings_cut_the_answer(backend: LocalBackend) -> None:
    full = await backend.complete(ask("Count the apples.", max_tokens=40))
    assert len(full.text) > 12, "the tiny model should produce enough text to cut"
    stop = full.text[8:11]
    cut = await backend.complete(ask("Count the apples.", max_tokens=40, stop=[stop]))
    assert cut.text == full.text[: full.text.find(stop)]
    assert stop not in cut.text
    assert cut.finish_reason == "stop"
    assert cut.usage.completion_tokens < full.usage.completion_tokens


async def test_seeded_sampling_is_reproducible(backend: LocalBackend) -> None:
    a = await backend.complete(ask("Pick words.", temperature=1.0, seed=7, max_tokens=24))
    b = await backend.complete(ask("Pick words.", temperature=1.0, seed=7, max_tokens=24))
    c = await backend.complete(ask("Pick words.", temperature=1.0, seed=8, max_tokens=24))
    assert a.text == b.text
    assert a.text != c.text


async def test_concurrent_requests_batch_and_match_solo_answers(tiny_home: Path) -> None:
    prompts = [f"Question {i}: " + "why " * i for i in range(6)]
    limits = [8, 12, 16, 20, 10, 6]
    solo = LocalBackend("tiny-qwen3", home=tiny_home, dtype="float32", max_batch_size=1)
    batched = LocalBackend("tiny-qwen3", home=tiny_home, dtype="float32", max_batch_size=4)
    try:
        expected = [await solo.complete(ask(p, max_tokens=n)) for p, n in zip(prompts, limits, strict=True)]
        got: list[Any] = [None] * len(prompts)

        async def one(i: int) -> None:
            got[i] = await batched.complete(ask(prompts[i], max_tokens=limits[i]))

        async with anyio.create_task_group() as group:
            for i in range(len(prompts)):
                group.start_soon(one, i)
    finally:
        await solo.aclose()
        await batched.aclose()
    for want, have, limit in zip(expected, got, limits, strict=True):
        assert have.text == want.text  # fp32: left padding does not change the greedy answer
        assert have.usage == want.usage
        assert have.usage.completion_tokens <= limit


async def test_event_loop_stays_responsive_during_generation(backend: LocalBackend) -> None:
    await backend.load()
    ticks = 0
    finished = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not finished.is_set():
            ticks += 1
            await anyio.sleep(0.005)

    async def generate() -> None:
        await backend.complete(ask("Write a long answer.", max_tokens=200))
        finished.set()

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        group.start_soon(generate)
    # A blocked loop would let the ticker run once, before generation starts.
    assert ticks >= 5


async def test_cancelled_request_leaves_backend_usable(backend: LocalBackend) -> None:
    with anyio.move_on_after(0.05):
        await backend.complete(ask("Write a very long answer.", max_tokens=400))
    reply = await backend.complete(ask("Short one.", max_tokens=4))
    assert reply.usage.completion_tokens <= 4


async def test_bad_requests_are_clear_errors(backend: LocalBackend) -> None:
    with pytest.raises(BackendError, match="at least one message"):
        await backend.complete(ChatRequest(messages=[]))
    with pytest.raises(BackendError, match="max_tokens"):
        await backend.complete(ask("hi", max_tokens=0))
    with pytest.raises(BackendError, match="handles at most"):
        await backend.complete(ask("word " * 9000, max_tokens=4))
    assert (await backend.complete(ask("still fine", max_tokens=3))).usage.completion_tokens <= 3


async def test_closed_backend_refuses_work(tiny_home: Path) -> None:
    local = LocalBackend(tiny_home / "tiny-qwen3", dtype="float32")
    assert (await local.complete(ask("hi", max_tokens=2))).text is not None
    await local.aclose()
    with pytest.raises(BackendError, match="closed"):
        await local.complete(ask("hi", max_tokens=2))


def test_unknown_model_and_bad_settings_fail_early(tiny_home: Path) -> None:
    with pytest.raises(KeyError, match="known models"):
        LocalBackend("gpt-17", home=tiny_home)
    with pytest.raises(ValueError, match="dtype"):
        LocalBackend("tiny-qwen3", home=tiny_home, dtype="int3")


def test_auto_dtype_uses_bf16_only_with_native_cpu_support() -> None:
    from operators.backends.local import cpu_has_native_bf16, resolve_dtype

    assert cpu_has_native_bf16("flags : fpu sse2 avx2 avx512f avx512_bf16")
    assert cpu_has_native_bf16("flags : fpu amx_bf16 amx_tile")
    assert not cpu_has_native_bf16("flags : fpu sse2 avx2 fma")
    assert resolve_dtype("float16") == "float16"
    assert resolve_dtype("auto") in ("bfloat16", "float32")


def sample(content: str, *, seed: int | None, max_tokens: int = 24) -> ChatRequest:
    """A sampled request as the engine sends it: the draw on top of the backend's sampling."""
    return ChatRequest(
        messages=[ChatMessage(role="user", content=content)],
        sampling=SamplingParams(max_tokens=max_tokens),
        draw=DrawSettings(temperature=1.0, top_p=1.0, seed=seed),
    )


async def test_complete_many_samples_n_distinct_rows_in_one_generate(backend: LocalBackend) -> None:
    assert isinstance(backend, SupportsCompleteMany)
    replies = await backend.complete_many(sample("Pick words.", seed=11), 4)
    assert len(replies) == 4
    assert len({reply.text for reply in replies}) == 4  # one RNG stream over the rows: each row its own sample
    assert backend.generate_calls == 1 and backend.generated_rows == 4
    for reply in replies:
        assert reply.model == "tiny-qwen3"
        assert reply.finish_reason in {"stop", "length"}
        assert 1 <= reply.usage.completion_tokens <= 24


async def test_complete_many_is_reproducible_per_seed(backend: LocalBackend) -> None:
    first = [r.text for r in await backend.complete_many(sample("Pick words.", seed=7), 3)]
    again = [r.text for r in await backend.complete_many(sample("Pick words.", seed=7), 3)]
    other = [r.text for r in await backend.complete_many(sample("Pick words.", seed=8), 3)]
    assert first == again
    assert first != other


async def test_complete_many_counts_the_prompt_once(backend: LocalBackend) -> None:
    request = sample("Count the apples.", seed=3, max_tokens=12)
    solo = await backend.complete(request.model_copy(update={"draw": None}))
    replies = await backend.complete_many(request, 3)
    assert replies[0].usage.prompt_tokens == solo.usage.prompt_tokens > 0
    assert [r.usage.prompt_tokens for r in replies[1:]] == [0, 0]
    assert all(1 <= r.usage.completion_tokens <= 12 for r in replies)


async def test_complete_many_cuts_each_row_at_its_own_end(backend: LocalBackend) -> None:
    replies = await backend.complete_many(sample("Tell me a long story.", seed=5, max_tokens=9), 5)
    for reply in replies:
        if reply.finish_reason == "length":
            assert reply.usage.completion_tokens == 9
        else:
            assert reply.usage.completion_tokens <= 9


async def test_complete_many_of_a_greedy_draw_returns_copies_of_the_greedy_answer(backend: LocalBackend) -> None:
    request = ask("Name a river.", max_tokens=16)
    alone = await backend.complete(request)
    calls = backend.generate_calls
    replies = await backend.complete_many(request, 3)
    assert [r.text for r in replies] == [alone.text] * 3
    assert backend.generate_calls == calls + 1 and backend.generated_rows == 2  # generated once, not 3 times
    assert [r.usage.prompt_tokens for r in replies] == [alone.usage.prompt_tokens, 0, 0]
    assert [r.usage.completion_tokens for r in replies] == [alone.usage.completion_tokens] * 3


async def test_complete_many_of_one_is_complete(backend: LocalBackend) -> None:
    request = sample("Pick words.", seed=7)
    (many,) = await backend.complete_many(request, 1)
    single = await backend.complete(request)
    assert many.text == single.text and many.usage == single.usage


async def test_complete_many_errors_and_cancellation(backend: LocalBackend) -> None:
    with pytest.raises(BackendError, match="n >= 1"):
        await backend.complete_many(sample("hi", seed=1), 0)
    with pytest.raises(BackendError, match="handles at most"):
        await backend.complete_many(sample("word " * 9000, seed=1, max_tokens=4), 3)
    with anyio.move_on_after(0.05):
        await backend.complete_many(sample("Write a very long answer.", seed=1, max_tokens=400), 4)
    replies = await backend.complete_many(sample("Short one.", seed=2, max_tokens=4), 2)
    assert len(replies) == 2 and all(r.usage.completion_tokens <= 4 for r in replies)


async def test_a_sampled_node_makes_one_batched_generate_for_its_sampled_draws(tiny_home: Path) -> None:
    local = LocalBackend("tiny-qwen3", home=tiny_home, dtype="float32", defaults=SamplingParams(max_tokens=16))
    engine = WorkflowEngine(default_registry(), local, max_reasks=0)  # one request per draw, whatever the reply
    try:
        graph = WorkflowGraph(stages=[OperatorNode(id="node_1", operator="Custom", samples=4)])
        await engine.run(graph, TaskSpec(problem="What is 2 + 2?", task_type="math"))
    finally:
        await local.aclose()
    # The greedy draw alone, and the 3 sampled draws' shared first prompt as ONE generate of 3 rows.
    assert local.generate_calls == 2 and local.generated_rows == 4

"""Per-call sampling (`DrawSettings`) and `n` samples per request across the backends."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.backends.base import (
    GREEDY,
    BackendError,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    DrawSettings,
    SamplingParams,
    SupportsCompleteMany,
    Usage,
    complete_many,
    draw_seed,
    effective_sampling,
    split_usage,
)
from operators.backends.openai_compat import OpenAICompatBackend, RetryPolicy
from operators.backends.scripted import RecordingBackend, ScriptedBackend, request_fingerprint
from operators.base import Category, OperatorOutput, OperatorRuntime, OperatorSpec, Role
from operators.library._dialogue import ask
from operators.parsing import ReplyError
from tests.support.openai_stub import OpenAIStub, StubReply

MODEL = "stub-model"
SAMPLE = DrawSettings(temperature=0.8, top_p=0.95, seed=42)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def backend_for(stub: OpenAIStub, **overrides: object) -> OpenAICompatBackend:
    settings: dict[str, object] = {
        "base_url": stub.base_url,
        "model": MODEL,
        "retry": RetryPolicy(max_retries=0),
        "timeout_s": 5.0,
        "rng": random.Random(0),
    }
    settings.update(overrides)
    return OpenAICompatBackend(**settings)  # type: ignore[arg-type]


def request(text: str = "Write f.", draw: DrawSettings | None = None) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], draw=draw)


def test_draw_overrides_only_temperature_top_p_and_seed() -> None:
    defaults = SamplingParams(temperature=0.3, top_p=0.9, max_tokens=77, stop=["END"])
    applied = effective_sampling(request(draw=SAMPLE), defaults)
    assert (applied.temperature, applied.top_p, applied.seed) == (0.8, 0.95, 42)
    assert (applied.max_tokens, applied.stop) == (77, ["END"])
    greedy = effective_sampling(request(draw=GREEDY), defaults)
    assert (greedy.temperature, greedy.top_p, greedy.seed) == (0.0, 1.0, None)
    assert effective_sampling(request(), defaults) == defaults


def test_draw_settings_are_bounded() -> None:
    with pytest.raises(ValueError):
        DrawSettings(temperature=-0.1)
    with pytest.raises(ValueError):
        DrawSettings(top_p=0.0)
    assert GREEDY.greedy and not SAMPLE.greedy


def test_split_usage_counts_the_prompt_once() -> None:
    shares = split_usage(Usage(prompt_tokens=100, completion_tokens=31), 3)
    assert [s.prompt_tokens for s in shares] == [100, 0, 0]
    assert sum(s.completion_tokens for s in shares) == 31


async def test_openai_sends_the_draw(stub: OpenAIStub) -> None:
    backend = backend_for(stub, sampling=SamplingParams(max_tokens=64))
    try:
        await backend.complete(request(draw=SAMPLE))
    finally:
        await backend.aclose()
    body = stub.chat_requests[0].body
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (0.8, 0.95, 42, 64)
    assert "n" not in body


async def test_openai_can_be_told_not_to_send_seeds(stub: OpenAIStub) -> None:
    backend = backend_for(stub, send_seed=False)
    try:
        await backend.complete(request(draw=SAMPLE))
    finally:
        await backend.aclose()
    body = stub.chat_requests[0].body
    assert "seed" not in body and (body["temperature"], body["top_p"]) == (0.8, 0.95)


async def test_openai_complete_many_is_one_request_with_n(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(choices=("def f(): return 1", "def f(): return 2", "def f(): return 3"), prompt_tokens=50))
    backend = backend_for(stub)
    try:
        assert isinstance(backend, SupportsCompleteMany)
        responses = await backend.complete_many(request(draw=SAMPLE), 3)
    finally:
        await backend.aclose()
    [sent] = stub.chat_requests
    assert sent.body["n"] == 3 and sent.body["seed"] == 42
    assert [r.text for r in responses] == ["def f(): return 1", "def f(): return 2", "def f(): return 3"]
    assert [r.usage.prompt_tokens for r in responses] == [50, 0, 0]
    assert backend.usage_log.totals().prompt_tokens == 50


async def test_openai_fewer_choices_than_asked_is_an_error(stub: OpenAIStub) -> None:
    backend = backend_for(stub)
    original = backend._parse

    def truncated(body: bytes, n: int = 1) -> list[ChatResponse]:
        return original(body, n + 1)  # as if the server had returned one choice fewer than asked

    backend._parse = truncated  # type: ignore[method-assign]
    try:
        with pytest.raises(BackendError, match="may not support `n`"):
            await backend.complete_many(request(draw=SAMPLE), 2)
    finally:
        await backend.aclose()


async def test_complete_many_loops_with_distinct_seeds_without_n_support() -> None:
    class PlainBackend:
        def __init__(self) -> None:
            self.seeds: list[int | None] = []

        @property
        def model(self) -> str:
            return "plain"

        def cache_key(self) -> str:
            return "plain"

        async def complete(self, req: ChatRequest) -> ChatResponse:
            self.seeds.append(req.draw.seed if req.draw else None)
            return ChatResponse(text=f"seed {self.seeds[-1]}", model="plain")

        async def aclose(self) -> None:
            return None

    plain = PlainBackend()
    assert not isinstance(plain, SupportsCompleteMany)
    responses = await complete_many(plain, request(draw=SAMPLE), 3)
    assert plain.seeds == [42, 43, 44] == [draw_seed(42, i) for i in range(3)]
    assert len({r.text for r in responses}) == 3


async def test_scripted_answers_per_seed_and_records_batches() -> None:
    backend = ScriptedBackend(rules=[lambda r: f"seed {r.draw.seed if r.draw else None}"])
    responses = await complete_many(backend, request(draw=SAMPLE), 3)
    assert [r.text for r in responses] == ["seed 42", "seed 43", "seed 44"]
    assert [n for _, n in backend.batches] == [3]
    again = await backend.complete(request(draw=SAMPLE))
    assert again.text == "seed 42"  # deterministic per seed


def test_greedy_requests_keep_their_recording_fingerprint() -> None:
    plain = request()
    assert request_fingerprint(request(draw=GREEDY)) == request_fingerprint(plain)
    assert request_fingerprint(request(draw=SAMPLE)) != request_fingerprint(plain)
    other = DrawSettings(temperature=0.8, top_p=0.95, seed=43)
    assert request_fingerprint(request(draw=SAMPLE)) != request_fingerprint(request(draw=other))


SPEC = OperatorSpec(
    name="AskDouble",
    category=Category.SOLVING,
    role=Role.SOLUTION,
    summary="test double",
    when_to_use="tests only",
    signature="AskDouble() -> {text}",
)


async def test_operator_requests_carry_the_runtime_draw_including_re_asks() -> None:
    backend = ScriptedBackend(["unusable", "fine"])

    async def accept(text: str) -> OperatorOutput:
        if text == "unusable":
            raise ReplyError("say fine")
        return OperatorOutput(text=text)

    await ask(OperatorRuntime(llm=backend, draw=SAMPLE), SPEC, "prompt", accept, reply_format=None)
    assert [r.draw for r in backend.requests] == [SAMPLE, SAMPLE]


async def test_operator_requests_are_greedy_by_default() -> None:
    backend = ScriptedBackend(["ok"])

    async def accept(text: str) -> str:
        return text

    await ask(OperatorRuntime(llm=backend), SPEC, "prompt", accept, reply_format=None)
    assert backend.requests[0].draw == GREEDY


async def test_recorded_samples_replay_under_the_same_seeds(tmp_path: Path) -> None:
    class NoBatchScripted(ScriptedBackend):
        complete_many = None  # type: ignore[assignment]

    live = NoBatchScripted(rules=[lambda r: f"sample for seed {r.draw.seed if r.draw else None}"])
    recorder = RecordingBackend(live, tmp_path / "run.jsonl")
    recorded = await recorder.complete_many(request(draw=SAMPLE), 3)
    replay = ScriptedBackend.from_recording(tmp_path / "run.jsonl")
    replayed = await replay.complete_many(request(draw=SAMPLE), 3)
    assert [r.text for r in replayed] == [r.text for r in recorded]
    assert len({r.text for r in recorded}) == 3


async def test_send_seed_false_in_a_model_config_reaches_the_backend(stub: OpenAIStub) -> None:
    from operators.backends.config import OpenAIModelConfig
    from operators.backends.factory import build_backend

    config = OpenAIModelConfig(backend="openai", base_url=stub.base_url, model=MODEL, max_retries=0, send_seed=False)
    backend = build_backend(config)
    try:
        await backend.complete(request(draw=SAMPLE))
    finally:
        await backend.aclose()
    assert "seed" not in stub.chat_requests[0].body

"""Record an evaluation (executor and policy calls) and replay it offline with identical results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from mcp import Client

from flowsteer_mcp.director.direct import DirectDirector
from flowsteer_mcp.director.episode import Director
from flowsteer_mcp.director.generation import PolicySampling, generate
from flowsteer_mcp.director.template import TemplateDirector
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.base import ChatBackend, ChatRequest
from operators.backends.config import load_executor_config
from operators.backends.scripted import RecordingBackend, ScriptedBackend, ScriptExhaustedError, load_recordings
from operators.registry import default_registry
from tests.support.openai_stub import OpenAIStub, StubReply
from training.data import Problem
from training.evaluate import EvalReport, evaluate
from training.evaluate.policy_recording import RecordingPolicyTransport, ReplayPolicyTransport
from training.evaluate.recording import executor_backend, replay_backend, start_recording, with_seed

SCRIPTED_CONFIG = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 16"

[models.script.sampling]
temperature = 0.7
"""


def operator_reply(request: ChatRequest) -> str:
    """Executor test double: replies that differ per operator and per problem, so a wrong replay shows."""
    problem = request.messages[-1].content
    number = 16 if "Amber" in problem else 29
    if request.operator == "Programmer":
        return f"```python\ndef solve():\n    return {number}\n```"
    if request.operator == "Verify":
        return "Checked independently: the answer is correct."
    return f"Reasoning about it.\nFinal answer: {number}"


def problems() -> list[Problem]:
    return [
        Problem(
            id="toy/amber",
            source="gsm8k",
            problem_type="math",
            problem="Amber, Micah, and Ahito ran 52 miles in total. Amber ran 8 miles. Micah ran 3.5 times what "
            "Amber ran. How many miles did Ahito run?",
            ground_truth="16",
        ),
        Problem(id="toy/sum", source="gsm8k", problem_type="math", problem="What is 20 + 9?", ground_truth="29"),
    ]


async def run_eval(backend: ChatBackend) -> EvalReport:
    registry = default_registry()
    server = build_server(
        ServerSettings(), registry=registry, runner=WorkflowEngine(registry, backend), store=MemoryStore()
    )

    def make_client() -> Client:
        return Client(server.mcp)

    directors: list[Director] = [DirectDirector(backend), TemplateDirector()]
    return await evaluate(problems(), directors, make_client=make_client, concurrency=4, progress=False)


def outcome(report: EvalReport) -> list[tuple[Any, ...]]:
    return [(i.director, i.problem_id, i.answer, i.score, i.dsl, i.llm_calls, i.tokens, i.error) for i in report.items]


async def test_recorded_evaluation_replays_identically(tmp_path: Path) -> None:
    recording = start_recording(tmp_path / "run.jsonl")
    live = ScriptedBackend(rules=[operator_reply])
    recorded = await run_eval(RecordingBackend(live, recording))
    assert all(item.error is None for item in recorded.items), [i.error for i in recorded.items]
    assert [i.score for i in recorded.items] == [1.0, 1.0, 1.0, 1.0]
    exchanges = load_recordings(recording)
    assert len(exchanges) == len(live.requests) > 4

    replayer = replay_backend(recording)
    replayed = await run_eval(replayer)
    assert outcome(replayed) == outcome(recorded)
    assert len(replayer.requests) == len(live.requests)


async def test_replay_of_an_unrecorded_request_fails_loudly(tmp_path: Path) -> None:
    recording = start_recording(tmp_path / "partial.jsonl")
    await run_eval(RecordingBackend(ScriptedBackend(rules=[operator_reply]), recording))
    lines = recording.read_text(encoding="utf-8").splitlines()
    amber_free = [line for line in lines if "Amber" not in line]
    recording.write_text("\n".join(amber_free) + "\n", encoding="utf-8")
    report = await run_eval(replay_backend(recording))
    direct_amber = next(i for i in report.items if i.director == "direct" and i.problem_id == "toy/amber")
    assert direct_amber.error is not None and "no recording for request" in direct_amber.error
    assert direct_amber.score == 0.0


def test_seed_reaches_the_executor_sampling(tmp_path: Path) -> None:
    config = tmp_path / "executor.toml"
    config.write_text(SCRIPTED_CONFIG, encoding="utf-8")
    named = load_executor_config(config, env={})
    seeded = with_seed(named, 1234)
    assert seeded.config.sampling.seed == 1234
    assert seeded.config.sampling.temperature == 0.7
    assert named.config.sampling.seed is None  # the original is untouched
    assert with_seed(named, None) is named


def test_executor_backend_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("FLOWSTEER_CONFIG", "FLOWSTEER_EXECUTOR_MODEL", "FLOWSTEER_EXECUTOR_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    config = tmp_path / "executor.toml"
    config.write_text(SCRIPTED_CONFIG, encoding="utf-8")
    recorder = executor_backend(config, seed=3, record=tmp_path / "r.jsonl")
    assert isinstance(recorder, RecordingBackend) and isinstance(recorder.inner, ScriptedBackend)
    plain = executor_backend(config)
    assert isinstance(plain, ScriptedBackend)
    with pytest.raises(ValueError, match="exclude each other"):
        executor_backend(config, record=tmp_path / "a.jsonl", replay=tmp_path / "b.jsonl")
    with pytest.raises(FileNotFoundError, match="recording file not found"):
        executor_backend(config, replay=tmp_path / "missing.jsonl")


def stub_policy(body: dict[str, Any]) -> StubReply:
    last = body["messages"][-1]["content"]
    return StubReply(content=f"<action>add</action><operator>Custom</operator> [{len(last)}]", reasoning="short")


async def policy_generation(transport: httpx2.AsyncBaseTransport, base_url: str, text: str) -> str:
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="not-needed", max_retries=0, http_client=httpx2.AsyncClient(transport=transport)
    )
    try:
        generation = await generate(
            client,
            "policy-model",
            [{"role": "system", "content": "You direct."}, {"role": "user", "content": text}],
            PolicySampling(seed=5, request_token_ids=False),
            max_tokens=64,
            thinking=None,
        )
    finally:
        await client.close()
    return generation.text


async def test_policy_calls_are_recorded_over_http_and_replayed_offline(tmp_path: Path) -> None:
    recording = start_recording(tmp_path / "policy.jsonl")
    with OpenAIStub(responder=stub_policy) as stub:
        texts = [await policy_generation(RecordingPolicyTransport(recording), stub.base_url, t) for t in ("a", "bbb")]
        assert len(stub.chat_requests) == 2
    exchanges = load_recordings(recording)
    assert [e.request.operator for e in exchanges] == ["policy", "policy"]
    assert exchanges[0].request.sampling is not None and exchanges[0].request.sampling.seed == 5
    assert exchanges[0].response.reasoning == "short"

    replay = ReplayPolicyTransport(replay_backend(recording, policy=True))
    offline = "http://policy-replay.invalid/v1"  # never contacted
    assert [await policy_generation(replay, offline, t) for t in ("a", "bbb")] == texts
    with pytest.raises(openai.NotFoundError, match="no recording"):
        await policy_generation(replay, offline, "never asked")
    # the executor's replay ignores policy exchanges
    with pytest.raises(ScriptExhaustedError, match="no response left"):
        await replay_backend(recording).complete(exchanges[0].request)

"""A `score_fn` given to the `Trainer` grades its rollouts: `Trainer._collect` passes it to `collect_groups`,
which grades every finished trajectory with it (the in-memory MCP server, a scripted runner answering 42, and
the OpenAI-compatible stub playing a vLLM-served policy)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from openai import AsyncOpenAI

from flowsteer_mcp.server import build_server
from tests.support.openai_stub import OpenAIStub
from tests.support.scripted_runner import ScriptedRunner
from tests.training.test_rollout_worker import REGISTRY, ScriptedVllmPolicy, problem
from training.data import Problem
from training.rollout import in_process_clients
from training.scoring import ScoreResult
from training.train.config import parse_train_config
from training.train.loop import Trainer, TrainingRun


def train_config() -> Any:
    return parse_train_config(
        {
            "run": {"steps": 1},
            "policy": {"model": "tiny"},
            "executor": {"backend": "policy-server"},
            "data": {"paths": ["x.jsonl"]},
            "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2, "canvas": {"finish": "relaxed"}},
        }
    )


async def test_the_trainers_score_fn_grades_its_rollouts() -> None:
    graded: list[tuple[str, str | None]] = []

    async def lenient(item: Problem, answer: str | None) -> ScoreResult:
        graded.append((item.id, answer))
        return ScoreResult(score=0.25, correct=False, method="lenient", extracted=answer or "")

    server = build_server(registry=REGISTRY, runner=ScriptedRunner(answer=lambda graph, task: "42"))
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        run = SimpleNamespace(
            openai=AsyncOpenAI(base_url=stub.base_url, api_key="not-needed", max_retries=0),
            adapter="policy",
            make_client=in_process_clients(server.mcp),
            service=SimpleNamespace(replicas=None),
        )
        batch = await Trainer(train_config(), score_fn=lenient)._collect(cast(TrainingRun, run), [problem("p0")], 1)

    assert sorted(graded) == [("p0", "42"), ("p0", "42")]  # the shared scorer would have given 42 a 1.0
    assert [e.reward.correctness for e in batch.episodes] == [0.25, 0.25]
    assert {e.metrics.score_method for e in batch.episodes} == {"lenient"}

"""The one episode runner shared by evaluation and rollouts: failures are values, the workflow is forgotten."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.sandbox import SandboxRefusedError
from training.data import Problem
from training.episodes import MakeClient, grade, run_director
from training.scoring import ScoreResult

TASK = TaskSpec(problem="What is 1 + 1?", task_type="math")
PROBLEM = Problem(id="toy/1", source="toy", problem_type="math", problem=TASK.problem, ground_truth="2")


class WorkflowDirector:
    """Creates one real workflow, optionally waits (`hold_s`) or fails, and answers 2."""

    name = "double"

    def __init__(self, *, hold_s: float = 0.0, fail: bool = False) -> None:
        self.hold_s = hold_s
        self.fail = fail

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        created = await client.call_tool("create_workflow", {"task": task.problem, "task_type": task.task_type})
        assert created.structured_content is not None
        await anyio.sleep(self.hold_s)
        if self.fail:
            raise RuntimeError("director crashed on purpose")
        return EpisodeResult(
            director=self.name, task=task, workflow_id=created.structured_content["workflow_id"], answer="2"
        )


def server_clients() -> tuple[MemoryStore, MakeClient]:
    store = MemoryStore()
    server = build_server(ServerSettings(), store=store, runner=NoRunner())

    @asynccontextmanager
    async def make_client() -> AsyncIterator[Client]:
        async with Client(server.mcp) as client:
            yield client

    return store, make_client


async def test_a_finished_episode_is_returned_and_its_workflow_deleted() -> None:
    store, make_client = server_clients()
    run = await run_director(WorkflowDirector(), TASK, make_client=make_client, timeout_s=30)
    assert run.episode is not None and run.episode.answer == "2"
    assert run.error is None and not run.timed_out
    assert await store.count() == 0


async def test_a_crashing_director_is_a_described_error_not_an_exception() -> None:
    _, make_client = server_clients()
    run = await run_director(WorkflowDirector(fail=True), TASK, make_client=make_client)
    assert run.episode is None
    assert run.error is not None and "RuntimeError: director crashed on purpose" in run.error


async def test_the_time_limit_cancels_the_episode_and_says_so() -> None:
    _, make_client = server_clients()
    run = await run_director(WorkflowDirector(hold_s=60), TASK, make_client=make_client, timeout_s=0.2)
    assert run.episode is None and run.timed_out and run.error is None


async def test_grading_turns_a_scorer_bug_into_a_value_but_a_refused_sandbox_stops_the_run() -> None:
    async def exact(problem: Problem, answer: str | None) -> ScoreResult:
        return ScoreResult(
            score=float(answer == problem.ground_truth), correct=answer == "2", method="exact", extracted=answer
        )

    async def broken(problem: Problem, answer: str | None) -> ScoreResult:
        raise ValueError("scorer bug")

    async def refused(problem: Problem, answer: str | None) -> ScoreResult:
        raise SandboxRefusedError("no safe sandbox here")

    graded = await grade(exact, PROBLEM, "2")
    assert graded.result is not None and graded.result.correct and graded.error is None
    failed = await grade(broken, PROBLEM, "2")
    assert failed.result is None and failed.error == "ValueError: scorer bug"
    with pytest.raises(SandboxRefusedError):
        await grade(refused, PROBLEM, "2")

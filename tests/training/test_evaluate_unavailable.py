"""An executor that cannot answer fails the run, not the workflow: the engine flags the node's trace row
(`unavailable`), and the evaluation records the episode as a run failure (`executor_unavailable`) that
`--resume` runs again, instead of scoring the workflow 0 for the server's outage.

Real engine and operators (`Custom`, `Programmer`), the real `DirectDirector` and `run_episode`; the backend is
the scripted test double, raising or stalling as a dead or overloaded server does.
"""

from __future__ import annotations

import anyio
from mcp import Client

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.direct import DirectDirector
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.base import BackendError, ChatRequest, ChatResponse
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry
from training.data import Problem
from training.evaluate.clients import in_process_clients
from training.evaluate.runner import run_episode

CLIENTS = in_process_clients(build_server(ServerSettings(), runner=NoRunner(), store=MemoryStore()).mcp)
TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")
PROBLEM = Problem(id="toy/0", source="toy", problem_type="math", problem="What is 2 + 2?", ground_truth="4")


def down(request: ChatRequest) -> BackendError:
    return BackendError("connection failed (ConnectError: refused); gave up after 5 attempts", retryable=True)


def unusable(request: ChatRequest) -> str:
    return "no code here"  # Programmer re-asks, then fails: the workflow's outcome


async def run_one(backend: ScriptedBackend, operator: str, **engine: float) -> list[dict[str, object]]:
    graph = WorkflowGraph(stages=[OperatorNode(id="node_1", operator=operator)])
    report = await WorkflowEngine(default_registry(), backend, **engine).run(graph, TASK)  # type: ignore[arg-type]
    return [row.model_dump() for row in report.trace]


async def test_a_backend_that_cannot_answer_flags_the_row_and_unusable_replies_do_not() -> None:
    (row,) = await run_one(ScriptedBackend(rules=[down]), "Custom")
    assert row["ok"] is False and row["unavailable"] is True and "executor call failed" in str(row["error"])
    (row,) = await run_one(ScriptedBackend(rules=[unusable]), "Programmer")
    assert row["ok"] is False and row["unavailable"] is False


async def test_a_call_past_the_per_call_limit_is_flagged() -> None:
    async def stall(request: ChatRequest) -> ChatResponse:
        await anyio.sleep(30)
        raise AssertionError("never reached")

    class Stalling(ScriptedBackend):
        async def complete(self, request: ChatRequest) -> ChatResponse:
            return await stall(request)

    (row,) = await run_one(Stalling(rules=[unusable]), "Custom", call_timeout_s=0.2)
    assert row["unavailable"] is True and "per-call limit" in str(row["error"])


class TraceDirector:
    """Test double for a canvas director: returns an episode whose final run has the given trace."""

    name = "traced"

    def __init__(self, trace: list[dict[str, object]]) -> None:
        self.trace = trace

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        return EpisodeResult(director=self.name, task=task, answer=None, finished=True, trace=self.trace)


async def test_the_evaluation_runs_such_an_episode_again_instead_of_scoring_it() -> None:
    trace = await run_one(ScriptedBackend(rules=[down]), "Custom")
    item = await run_episode(TraceDirector(trace), PROBLEM, make_client=CLIENTS)
    assert item.score_method == "executor_unavailable" and item.run_failure
    assert "could not answer node_1 (Custom)" in (item.error or "")

    direct = await run_episode(DirectDirector(ScriptedBackend(rules=[down])), PROBLEM, make_client=CLIENTS)
    assert direct.score_method == "executor_unavailable" and direct.run_failure

    unusable_trace = await run_one(ScriptedBackend(rules=[unusable]), "Programmer")
    outcome = await run_episode(TraceDirector(unusable_trace), PROBLEM, make_client=CLIENTS)
    assert not outcome.run_failure and outcome.score == 0.0  # the workflow's own failure is scored

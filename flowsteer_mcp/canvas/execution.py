"""The seam between the canvas and whatever runs a workflow (the engine, or nothing at all).

Also step 4 of a turn, `execute`: every run a step makes (after an edit, at finish, when the budget ends, or
`run_workflow`) goes through it, so a runner's failure is always a failed run, never a failed step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Literal, Protocol

import structlog
from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.text import clip

log = structlog.get_logger(__name__)
RUN_ERROR_CHARS = 2000

ExecutionStatus = Literal["ok", "degraded", "failed", "no_executor", "empty", "timeout"]
"""How a run ended. "ok": every stage needed for the answer succeeded. "degraded": the last stage failed but
an earlier stage left a valid solution, which is the answer (a failed stage never discards a valid earlier
solution); `error` says what failed. "failed": no answer at all. The rest: nothing ran, or not to the end."""

ANSWER_STATUSES: frozenset[str] = frozenset({"ok", "degraded"})  # the statuses whose output is an answer


class NodeTrace(BaseModel):
    """One operator call of a run (a loop body node appears once per iteration)."""

    node_id: str
    operator: str
    ok: bool
    output: str = ""
    error: str | None = None
    verdict: bool | None = None
    iteration: int | None = None
    skipped: bool = False  # e.g. the untaken branch of a conditional
    cached: bool = False
    llm_calls: int = 0
    tokens: int = 0
    latency_s: float = 0.0
    inputs_digest: str | None = None
    note: str | None = None  # why the engine took a decision here (branch choice, early loop exit, ...)
    unavailable: bool = False  # failed because the executor could not answer (OperatorOutput.unavailable)


class AnswerEvidence(BaseModel):
    """What the run's own checks know about its final answer, for the director's feedback (`[Evidence]`).

    Filled by the engine from what the stages established while the answer was the one it returned: a public-test
    score from whoever ran the tests (Test, Revise, an ensemble judging by execution) and the candidates'
    agreement from an ensemble's count. Nothing is run again to fill it. Why: a director can stop after one
    greedy draw when the public tests pass and the candidates agree, and sample or check more when they do not.
    """

    public_tests_total: int | None = Field(
        default=None, description="public tests run on the final answer; null when none ran"
    )
    public_tests_passed: int | None = Field(
        default=None, description="how many of them it passes; null with a total: not all, how many is unknown"
    )
    agreeing: int | None = Field(default=None, description="candidates that agree with the answer, itself included")
    candidates: int | None = Field(
        default=None, description="candidates compared (set only when there were at least two)"
    )
    agreement: Literal["answer", "behaviour", "program"] | None = Field(
        default=None, description="what the agreeing candidates share: the answer, the behaviour, or the program"
    )


class ExecutionReport(BaseModel):
    """Result of running the whole workflow once. `output` is the final answer: the current solution after
    the last stage, or after a degraded run the best solution the stages before the failed one left; it is
    None whenever the run produced no answer (an error is never passed off as an answer)."""

    status: ExecutionStatus
    output: str | None = None
    code: str | None = None  # final program for code tasks
    error: str | None = None
    llm_calls: int = 0
    tokens: int = 0
    duration_s: float = 0.0
    cache_hits: int = 0
    trace: list[NodeTrace] = Field(default_factory=list)
    evidence: AnswerEvidence | None = None  # about `output`; None when nothing was established about it

    @property
    def ok(self) -> bool:
        """True when the run produced an answer that counts (status ok or degraded): finish records it as the
        final answer and it is scored. Whether anything failed on the way is in `status` and `error`."""
        return self.status in ANSWER_STATUSES


class ProgressEvent(BaseModel):
    """One operator call starting or finishing. `completed` is not a progress counter: a "started" event repeats
    the count of the last "finished" one, and parallel branches start together; a consumer that needs a value
    increasing with every event numbers the events itself (as the MCP layer does).

    The draw and usage fields let a consumer say what is running between events (a model call can take
    minutes): which draw of a sampled node this is, and what the run has used so far."""

    node_id: str
    operator: str
    phase: Literal["started", "finished"]
    completed: int  # operator calls finished so far in this run
    total: int  # operator calls expected (upper bound when loops may exit early)
    draw: int = 0  # 0-based index of this call among the node's draws (0: the greedy one)
    draws: int = 1  # draws of this node in this pass (its `samples`)
    iteration: int | None = None  # loop iteration (0-based), for a loop body node
    llm_calls: int = 0  # executor requests of the whole run so far (finished operator calls)
    tokens: int = 0  # executor tokens of the whole run so far (finished operator calls)


ProgressCallback = Callable[[ProgressEvent], Awaitable[None]]

# The workflow a run belongs to, set by whoever opens the workflow (the server's workbench): a runner that
# memoises node results keys them by it, so one workflow is never served, and never charged for, another's
# calls (the engine's `memo_scope`).
RUN_SCOPE: ContextVar[str | None] = ContextVar("flowsteer_run_scope", default=None)


class WorkflowRunner(Protocol):
    """Runs a canvas graph for a task. Must be cancellation-safe and must not raise for operator failures."""

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport: ...


class NoRunner:
    """Used when no executor LLM is configured: the canvas still edits, and says clearly that nothing ran."""

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        return ExecutionReport(
            status="no_executor",
            error="no executor configured: the workflow was edited but not run "
            "(configure an executor model to execute workflows)",
        )


async def execute(
    runner: WorkflowRunner, graph: WorkflowGraph, task: TaskSpec, progress: ProgressCallback | None
) -> ExecutionReport:
    """Run `graph` once and report how it went; never raises for the runner's failures.

    Why: a valid edit stands whatever its run does, so a runner that refuses the graph (CanvasError) or
    crashes is reported as a failed run of the edited graph, not as a rejected step. A cancellation still
    propagates (the step's transaction restores the state)."""
    if graph.is_empty:
        return ExecutionReport(status="empty")
    try:
        return await runner.run(graph, task, progress=progress)
    except CanvasError as error:  # the runner refused this graph: a failed run, the edit still stands
        log.warning("runner_rejected_workflow", code=error.code.value)
        return ExecutionReport(
            status="failed", error=clip(f"executor rejected the workflow: {error.message}", RUN_ERROR_CHARS)
        )
    except Exception as error:  # a runner bug must not take the canvas down
        log.exception("runner_crashed")
        return ExecutionReport(
            status="failed", error=clip(f"executor error: {type(error).__name__}: {error}", RUN_ERROR_CHARS)
        )

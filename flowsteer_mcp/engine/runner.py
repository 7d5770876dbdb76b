"""`WorkflowEngine`: runs a canvas graph with real operators and returns an `ExecutionReport`.

It implements the canvas's `WorkflowRunner` protocol and executes the typed graph directly (no generated
code, no DSL round trip), so what runs is exactly what the canvas shows and scores.

Final answer: the current solution after the last stage (code tasks: the current program, or the solution
text when no operator produced a separate program). Statuses:
- "ok": the last stage succeeded and there is a final answer.
- "degraded": the last stage failed, but an earlier stage left a valid solution. A failed output never
  changes the flow state, so the state after a failed last stage holds the latest valid solution (the best
  so far); that is the answer, and `error` names the failed stage and its error. A failed stage never
  discards a valid earlier solution: degraded is an answer, scored and accepted by finish like "ok"
  (`ExecutionReport.ok` is true for both), and the status and error tell that something went wrong.
- "failed": no valid solution at all (the error names the failing node, or why nothing produced one).
A run past `run_timeout_s` reports "timeout" with its partial trace and no answer: a run cut short by its
time limit is reported as such, not passed off as an answer. Cancelling the caller cancels the run:
nothing is left running and nothing half-done is memoised.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
import structlog

from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressCallback
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine.context import RunContext, planned_total
from flowsteer_mcp.engine.memo import MemoCache
from flowsteer_mcp.engine.node_call import (
    DEFAULT_SAMPLE_TEMPERATURE,
    DEFAULT_SAMPLE_TOP_P,
    CallSettings,
    NodeCaller,
)
from flowsteer_mcp.engine.stages import StageDispatcher
from flowsteer_mcp.engine.state import FlowState
from operators.backends.base import ChatBackend
from operators.backends.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_RUN_TIMEOUT_S, MemoScope
from operators.base import DEFAULT_SANDBOX_TIMEOUT_S
from operators.registry import OperatorRegistry

log = structlog.get_logger(__name__)


class _NewMemo:
    """Sentinel: give the engine its own bounded memo cache (pass None to turn memoisation off)."""


NEW_MEMO = _NewMemo()


class WorkflowEngine:
    """Executes workflows for the canvas; one engine (and its memo cache) serves many runs."""

    def __init__(
        self,
        registry: OperatorRegistry,
        backend: ChatBackend,
        *,
        call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
        run_timeout_s: float | None = DEFAULT_RUN_TIMEOUT_S,
        memo: MemoCache | _NewMemo | None = NEW_MEMO,
        runtime_options: dict[str, Any] | None = None,
        max_reasks: int = 2,
        sampled_reasks: int | None = None,
        seed: int = 0,
        sample_temperature: float = DEFAULT_SAMPLE_TEMPERATURE,
        sample_top_p: float = DEFAULT_SAMPLE_TOP_P,
        sandbox_timeout_s: float = DEFAULT_SANDBOX_TIMEOUT_S,
        memo_scope: MemoScope = "workflow",
    ) -> None:
        if not sandbox_timeout_s > 0:
            raise ValueError(f"sandbox_timeout_s must be a positive number of seconds; got {sandbox_timeout_s!r}")
        for name, value in (("call_timeout_s", call_timeout_s), ("run_timeout_s", run_timeout_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds or None (no limit); got {value!r}")
        for name, count in (("max_reasks", max_reasks), ("sampled_reasks", sampled_reasks)):
            if count is not None and count < 0:
                raise ValueError(f"{name} must be >= 0; got {count}")
        self.registry = registry
        self.backend = backend
        self.run_timeout_s = run_timeout_s
        self.memo: MemoCache | None = MemoCache() if isinstance(memo, _NewMemo) else memo
        if not 0.0 < sample_temperature <= 2.0 or not 0.0 < sample_top_p <= 1.0:
            raise ValueError(
                f"sampled draws need 0 < temperature <= 2 and 0 < top_p <= 1; got {sample_temperature}, {sample_top_p}"
            )
        self._settings = CallSettings(
            call_timeout_s=call_timeout_s,
            max_reasks=max_reasks,
            sampled_reasks=sampled_reasks,
            runtime_options=dict(runtime_options or {}),
            seed=seed,
            sample_temperature=sample_temperature,
            sample_top_p=sample_top_p,
            sandbox_timeout_s=sandbox_timeout_s,
            memo_scope=memo_scope,
        )

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        if graph.is_empty:
            return ExecutionReport(status="empty", error="the workflow has no stages; add an operator to run it")
        ctx = RunContext(progress=progress, total=planned_total(graph))
        caller = NodeCaller(
            registry=self.registry, backend=self.backend, memo=self.memo, settings=self._settings, context=ctx
        )
        stages = StageDispatcher(caller)
        state = FlowState.from_task(task)
        failure: str | None = None
        current = graph.stages[0].id
        started = time.perf_counter()
        limit = self.run_timeout_s
        with anyio.move_on_after(math.inf if limit is None else limit) as scope:
            for stage in graph.stages:
                current = stage.id
                outcome = await stages.run(stage, state, ctx.trace)
                state, failure = outcome.state, outcome.failure

        report = ExecutionReport(
            status="ok",
            llm_calls=ctx.llm_calls,
            tokens=ctx.tokens,
            duration_s=time.perf_counter() - started,
            cache_hits=ctx.cache_hits,
            trace=ctx.trace,
        )
        if scope.cancelled_caught:
            running = ", ".join(f"{node} ({op})" for node, op in ctx.in_flight.items()) or "none"
            report.status = "timeout"
            report.error = (
                f"the run exceeded its {limit:g}s limit during stage {current} (interrupted: {running}); "
                "the trace holds what finished before"
            )
        elif (answer := state.final_answer()) is None:
            report.status = "failed"
            report.error = f"the last stage {current} failed: {failure}" if failure else _no_answer_reason(state, ctx)
        else:
            report.output = answer
            report.code = answer if task.task_type == "code" else None
            report.evidence = await anyio.to_thread.run_sync(state.answer_evidence)
            if failure is not None:
                report.status = "degraded"
                report.error = (
                    f"the last stage {current} failed, so the answer is the best solution the stages before "
                    f"it left: {failure}"
                )
        log.info(
            "workflow_run",
            status=report.status,
            stages=len(graph.stages),
            llm_calls=report.llm_calls,
            tokens=report.tokens,
            cache_hits=report.cache_hits,
            duration_s=round(report.duration_s, 3),
        )
        return report


def _no_answer_reason(state: FlowState, ctx: RunContext) -> str:
    failed = [row for row in ctx.trace if not row.ok and not row.skipped]
    if failed:
        first = failed[0]
        return (
            f"the workflow produced no answer: no solution-producing node succeeded "
            f"(first error: {first.node_id} ({first.operator}): {first.error})"
        )
    if state.guidance:
        return (
            "the workflow produced no answer: its stages only added guidance (a plan is not an answer); "
            "add a solver such as Custom, AnswerGenerate or Programmer after them"
        )
    return "the workflow produced no answer: no stage produced a solution; add a solver"

"""ScriptedRunner: a test double for the `WorkflowRunner` seam (no operators, no LLM).

Its output is derived from the graph it is given (by default the graph's DSL), so a test can tell which
graph actually ran. It can be told to fail or to crash, emits one started/finished progress pair per
operator node, can hold each run open for a while (to make overlapping runs observable), and records
every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.execution import ExecutionReport, NodeTrace, ProgressCallback, ProgressEvent
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec

TOKENS_PER_NODE = 10

AnswerFn = Callable[[WorkflowGraph, TaskSpec], str]


@dataclass(frozen=True)
class RunCall:
    """One `run` call as the double saw it (the graph is a deep copy, safe from later edits)."""

    graph: WorkflowGraph
    dsl: str
    task: TaskSpec


def dsl_answer(graph: WorkflowGraph, task: TaskSpec) -> str:
    return render(graph)


@dataclass
class ScriptedRunner:
    """Deterministic runner double: answer = `answer(graph, task)`; `failure` makes every run fail with that
    error; `crash` makes `run` raise it (a runner bug); `hold_s` keeps each run busy that long."""

    answer: AnswerFn = dsl_answer
    failure: str | None = None
    crash: Exception | None = None
    hold_s: float = 0.0
    calls: list[RunCall] = field(default_factory=list)
    active: int = 0
    max_active: int = 0

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        self.calls.append(RunCall(graph=graph.model_copy(deep=True), dsl=render(graph), task=task))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.hold_s:
                await anyio.sleep(self.hold_s)
            if self.crash is not None:
                raise self.crash
            nodes = list(graph.iter_operator_nodes())
            trace: list[NodeTrace] = []
            for done, node in enumerate(nodes):
                if progress is not None:
                    await progress(
                        ProgressEvent(
                            node_id=node.id, operator=node.operator, phase="started", completed=done, total=len(nodes)
                        )
                    )
                trace.append(
                    NodeTrace(
                        node_id=node.id,
                        operator=node.operator,
                        ok=True,
                        output=f"{node.operator} ran",
                        llm_calls=1,
                        tokens=TOKENS_PER_NODE,
                    )
                )
                if progress is not None:
                    await progress(
                        ProgressEvent(
                            node_id=node.id,
                            operator=node.operator,
                            phase="finished",
                            completed=done + 1,
                            total=len(nodes),
                        )
                    )
            usage = {"llm_calls": len(nodes), "tokens": TOKENS_PER_NODE * len(nodes)}
            if self.failure is not None:
                return ExecutionReport(status="failed", error=self.failure, trace=trace, **usage)
            return ExecutionReport(status="ok", output=self.answer(graph, task), trace=trace, **usage)
        finally:
            self.active -= 1

    def reset(self) -> None:
        """Back to the default script with no recorded calls (for a double shared between tests)."""
        self.answer = dsl_answer
        self.failure = None
        self.crash = None
        self.hold_s = 0.0
        self.calls.clear()
        self.active = self.max_active = 0

    @property
    def dsls(self) -> list[str]:
        return [call.dsl for call in self.calls]

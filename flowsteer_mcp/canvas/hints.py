"""Advisory next-step hints (`[BLOCK_FINISH] [NEXT] [REASON]`): a small rule table per task type.

The released FlowSteer-8b policy was trained with such hints, so they are on by default; they can be
switched off for ablations. BLOCK_FINISH is derived from the real finish gate, so hint and gate never disagree.
"""

from __future__ import annotations

from pydantic import BaseModel

from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.finish import Violation
from flowsteer_mcp.canvas.model import ParallelStage, WorkflowGraph, operator_nodes
from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats

_SOLVER = {"math": "Programmer", "code": "Programmer", "qa": "Custom", "general": "Custom"}
_CHECKER = {"math": "Verify", "code": "Test", "qa": "Review", "general": "Review"}
_ENSEMBLE = {"math": "ScEnsemble", "code": "ScEnsemble", "qa": "Aggregate", "general": "Aggregate"}
_ENSEMBLES = {"ScEnsemble", "Aggregate", "MdEnsemble"}


class Hint(BaseModel):
    block_finish: bool
    next: str  # "ADD:<Operator>", "ADD:conditional(C,F,done)" or "FINISH"
    reason: str

    def render(self) -> str:
        return f"[BLOCK_FINISH]={int(self.block_finish)} [NEXT]={self.next} [REASON]={self.reason}"


def _unensembled_parallel(graph: WorkflowGraph) -> bool:
    for index, stage in enumerate(graph.stages):
        if isinstance(stage, ParallelStage):
            after = graph.stages[index + 1] if index + 1 < len(graph.stages) else None
            if after is None or not ({n.operator for n in operator_nodes(after)} & _ENSEMBLES):
                return True
    return False


def advise(
    graph: WorkflowGraph,
    stats: GraphStats,
    task: TaskSpec,
    violations: list[Violation],
    last_execution: ExecutionReport | None,
    policy: FinishPolicy,
) -> Hint:
    kind = task.task_type
    ops = set(stats.operators)
    block = bool(violations)
    checker = _CHECKER[kind] if kind != "code" or task.public_tests else "Review"

    def add(operator: str, reason: str) -> Hint:
        return Hint(block_finish=block, next=f"ADD:{operator}", reason=reason)

    if not ops:
        return add(_SOLVER[kind], "the workflow is empty; start with a solver")
    if last_execution is not None and last_execution.status in ("failed", "timeout"):
        fix = "Programmer" if kind in ("math", "code") and "Programmer" not in ops else "Revise"
        return add(fix, f"the last run failed ({(last_execution.error or '')[:120]}); repair before finishing")
    if not ops & set(policy.solver_operators):
        return add(_SOLVER[kind], "planning/checking alone produces no answer; add a solver")
    if _unensembled_parallel(graph):
        return add(_ENSEMBLE[kind], "a parallel stage needs an ensemble after it to choose among its candidates")
    constraints = {v.constraint for v in violations}
    if "code_operators" in constraints and "Test" not in ops:
        return add("Test", "code tasks with tests need Test to run the public tests")
    if not stats.has_checker:
        return add(checker, "no checker yet; verify the solution before finishing")
    if "structure" in constraints or ("min_operators" in constraints and not stats.has_conditional):
        return Hint(
            block_finish=block,
            next=f"ADD:conditional({checker},Revise,done)",
            reason="add a self-correcting check: revise only when the check fails",
        )
    if "format" in constraints or ("min_operators" in constraints and "Format" not in ops):
        return add("Format", "end with Format to extract the short final answer")
    if "min_operators" in constraints:
        return add("Review", "the workflow is still shorter than the finish gate requires")
    if violations:
        return add(checker, violations[0].message)
    if last_execution is not None and last_execution.status == "degraded":
        # Advisory only: a degraded run has an answer, so finish is not blocked; the policy may still fix it.
        return Hint(
            block_finish=False,
            next="FINISH",
            reason="all finish constraints are met, but the last stage failed and the answer comes from an "
            "earlier stage; fix or remove that stage, or finish with this answer",
        )
    return Hint(block_finish=False, next="FINISH", reason="all finish constraints are met")

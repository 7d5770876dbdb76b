"""Advisory next-step hints (`[BLOCK_FINISH] [NEXT] [REASON]`): a short list of rules; the operator a rule
suggests for the task type comes from the operator specs, never from names written here.

The released FlowSteer-8b policy was trained with such hints, so they are on by default; they can be
switched off for ablations. BLOCK_FINISH is derived from the real finish gate, so hint and gate never disagree.
"""

from __future__ import annotations

from pydantic import BaseModel

from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.finish import Violation, has_formatter, program_runners, test_runners
from flowsteer_mcp.canvas.kinds import KINDS
from flowsteer_mcp.canvas.model import WorkflowGraph, operator_nodes
from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec, TaskType
from flowsteer_mcp.canvas.stats import GraphStats
from operators.base import Category, OperatorSpec, Role
from operators.registry import OperatorRegistry


class Hint(BaseModel):
    block_finish: bool
    next: str  # "ADD:<Operator>", "ADD:conditional(C,F,done)" or "FINISH"
    reason: str

    def render(self) -> str:
        return f"[BLOCK_FINISH]={int(self.block_finish)} [NEXT]={self.next} [REASON]={self.reason}"


def _unensembled_parallel(graph: WorkflowGraph, ensembles: set[str]) -> bool:
    for index, stage in enumerate(graph.stages):
        if KINDS[stage.kind].offers_candidates:
            after = graph.stages[index + 1] if index + 1 < len(graph.stages) else None
            if after is None or not ({n.operator for n in operator_nodes(after)} & ensembles):
                return True
    return False


class _Picks:
    """Which operator each rule suggests for this task, chosen from the specs: the one whose hints are for the
    task type (`hinted_for`), among those with the role or capability the rule needs."""

    def __init__(self, registry: OperatorRegistry, task: TaskSpec, ops: set[str]) -> None:
        self.registry = registry
        self.kind: TaskType = task.task_type
        self.ops = ops
        # A checker that runs tests cannot check a code task that has none.
        self.checkers = registry.matching(
            lambda s: s.role is Role.CHECKER and (bool(task.public_tests) or not s.runs_tests)
        )

    def _hinted(self, specs: list[OperatorSpec], kind: TaskType | None = None) -> list[OperatorSpec]:
        return [s for s in specs if (kind or self.kind) in s.hinted_for]

    @staticmethod
    def _first(*pools: list[OperatorSpec]) -> str:
        return next((pool[0].name for pool in pools if pool), "")

    def solver(self, solvers: list[str]) -> str:
        named = [self.registry.spec(n) for n in solvers if n in self.registry]
        return self._first(self._hinted(self.registry.matching(lambda s: s.solver)), named)

    def checker(self) -> str:
        """The task type's checker; one already in the workflow is preferred, so a conditional reuses it."""
        pool = self._hinted(self.checkers) or self._hinted(self.checkers, "general") or self.checkers
        return self._first([s for s in pool if s.name in self.ops], pool)

    def general_checker(self) -> str:
        return self._first(self._hinted(self.checkers, "general"), self.checkers)

    def ensemble(self) -> str:
        return self._first(self._hinted(self.registry.matching(lambda s: s.needs_candidates)))

    def ensembles(self) -> set[str]:
        return {s.name for s in self.registry.matching(lambda s: s.needs_candidates, include_legacy=True)}

    def repair(self) -> str:
        """After a failed run: the task type's program runner if the workflow has none, else the reviser."""
        runners = program_runners(self.registry)
        hinted = self._hinted([self.registry.spec(n) for n in runners])
        if hinted and not self.ops & set(runners):
            return hinted[0].name
        return self.reviser()

    def reviser(self) -> str:
        return self._first(self.registry.matching(lambda s: s.category is Category.REVISION))

    def test_runner(self) -> str:
        return self._first(self._hinted([self.registry.spec(n) for n in test_runners(self.registry)], "code"))

    def formatter(self) -> str:
        return self._first(self.registry.matching(lambda s: s.category is Category.FORMATTING))


def advise(
    graph: WorkflowGraph,
    stats: GraphStats,
    task: TaskSpec,
    violations: list[Violation],
    last_execution: ExecutionReport | None,
    policy: FinishPolicy,
    *,
    registry: OperatorRegistry,
) -> Hint:
    """The next step to suggest. Which operator a rule suggests comes from the specs (role, capabilities,
    `hinted_for`), so a plug-in that declares them is suggested and recognised like a built-in."""
    ops = set(stats.operators)
    block = bool(violations)
    picks = _Picks(registry, task, ops)
    checker = picks.checker()

    def add(operator: str, reason: str) -> Hint:
        return Hint(block_finish=block, next=f"ADD:{operator}", reason=reason)

    solvers = policy.solvers(registry)
    if not ops:
        return add(picks.solver(solvers), "the workflow is empty; start with a solver")
    if last_execution is not None and last_execution.status in ("failed", "timeout"):
        reason = f"the last run failed ({(last_execution.error or '')[:120]}); repair before finishing"
        return add(picks.repair(), reason)
    if not ops & set(solvers):
        return add(picks.solver(solvers), "planning/checking alone produces no answer; add a solver")
    if _unensembled_parallel(graph, picks.ensembles()):
        return add(picks.ensemble(), "a parallel stage needs an ensemble after it to choose among its candidates")
    constraints = {v.constraint for v in violations}
    if "code_operators" in constraints and not ops & set(test_runners(registry)):
        test_runner = picks.test_runner()
        return add(test_runner, f"code tasks with tests need {test_runner} to run the public tests")
    if not stats.has_checker:
        return add(checker, "no checker yet; verify the solution before finishing")
    if "structure" in constraints or ("min_operators" in constraints and not stats.has_conditional):
        return Hint(
            block_finish=block,
            next=f"ADD:conditional({checker},{picks.reviser()},done)",
            reason="add a self-correcting check: revise only when the check fails",
        )
    if "format" in constraints or ("min_operators" in constraints and not has_formatter(stats)):
        formatter = picks.formatter()
        return add(formatter, f"end with {formatter} to extract the short final answer")
    if "min_operators" in constraints:
        return add(picks.general_checker(), "the workflow is still shorter than the finish gate requires")
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

"""Control flow of the four stage kinds, executed directly on the typed graph.

Decisions (10-canvas.md §1 and §4; the engine documents its choices where the spec leaves room):
- A stage fails when its last executed node failed; a parallel stage fails only when every branch failed.
  A failed node never changes the state, so its error can never become the answer.
- Parallel: branches run concurrently on the same state. Candidates = the texts of the successful branches
  in branch order. A branch whose operator already occurred earlier in the same stage is a sampled draw
  (sampling temperature, its own derived seed), so `Programmer | Programmer` yields two different programs;
  the first occurrence stays greedy.
- Samples (`samples: k` on a node): the node behaves like k parallel branches of itself: draw 1 greedy,
  draws 2..k sampled with distinct seeds (node_call.py), all on the same input. An operator stage with k > 1
  is therefore run as a parallel stage: its k outputs become candidates for the next stage (an ensemble
  such as ScEnsemble votes over them) and the greedy draw, when it succeeded, is the current solution. A
  parallel branch with k > 1 contributes its k outputs in place. Inside a conditional or a loop a node has
  no stage after it that could see candidates, so validation refuses samples > 1 there; the engine runs
  only the greedy draw if one gets through. The state then continues as if the first successful non-guidance branch had run alone
  (its text is the current solution), plus the guidance of any planner branches. An ensemble stage after a
  parallel is what actually selects or combines; candidates are visible to exactly that next stage.
- Conditional `C ? F : P`: F runs only when C reports a failed check (verdict False). A check that gave
  no verdict, because it had none (None) or because C itself failed, takes the pass branch and its trace
  row says so: the spec runs F "if C reports a failed check", and F would otherwise revise blind, without
  feedback (measured with Qwen2.5-Coder-0.5B on GSM8K: such blind revisions turned correct answers wrong).
  F and P see the state after C (so Revise receives C's feedback). The untaken branch gets a trace row with skipped=True.
- Loop: the body runs up to `count` times; when the body holds a checker, the loop stops after the first
  iteration whose last checker ran successfully with verdict True. Trace rows carry the 1-based iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import ConditionalStage, LoopStage, OperatorNode, ParallelStage, Stage
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState
from operators.base import Role


@dataclass
class StageOutcome:
    state: FlowState
    failure: str | None = None  # None: the stage succeeded


def _applied(state: FlowState, result: NodeResult) -> FlowState:
    if not result.ok or result.role is None:
        return state
    return state.apply(result.role, result.output, uses_candidates=bool(result.spec and result.spec.needs_candidates))


def branch_draws(branches: list[OperatorNode]) -> list[list[int]]:
    """The draw indices each branch runs (node_call.draw_for: 0 is greedy, i >= 1 sampled).

    The first branch with a given operator starts at the greedy draw; a later branch with the same operator
    is all samples, so repeating an operator in a parallel stage adds diversity instead of a copy."""
    seen: set[str] = set()
    plan: list[list[int]] = []
    for node in branches:
        first = 0 if node.operator not in seen else 1
        seen.add(node.operator)
        plan.append(list(range(first, first + node.samples)))
    return plan


class StageRunner:
    def __init__(self, caller: NodeCaller) -> None:
        self._caller = caller

    async def run(self, stage: Stage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        if isinstance(stage, ParallelStage):
            return await self._parallel(stage, state, sink)
        if isinstance(stage, OperatorNode) and stage.samples > 1:  # k draws of itself, as a parallel stage
            return await self._parallel(ParallelStage(id=stage.id, branches=[stage]), state, sink)
        if isinstance(stage, ConditionalStage):
            outcome = await self._conditional(stage, state, sink)
        elif isinstance(stage, LoopStage):
            outcome = await self._loop(stage, state, sink)
        else:
            outcome = await self._operator(stage, state, sink)
        # Candidates of a parallel stage are meant for the one stage right after it.
        outcome.state = outcome.state.without_candidates()
        return outcome

    async def _operator(self, node: OperatorNode, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        result = await self._caller.call(node, state, sink=sink)
        return StageOutcome(_applied(state, result), None if result.ok else result.describe_failure())

    async def _parallel(self, stage: ParallelStage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        plan = branch_draws(stage.branches)
        results: list[list[NodeResult]] = [[] for _ in stage.branches]
        rows: list[list[list[NodeTrace]]] = [[[] for _ in draws] for draws in plan]

        async def branch(index: int) -> None:
            node, draws = stage.branches[index], plan[index]
            if draws == [0]:
                results[index] = [await self._caller.call(node, state, sink=rows[index][0])]
            else:
                results[index] = await self._caller.call_draws(node, state, draws, sinks=rows[index])

        try:
            async with anyio.create_task_group() as group:
                for index in range(len(stage.branches)):
                    group.start_soon(branch, index)
        finally:
            for branch_rows in rows:  # branch order, draw order, also when interrupted
                for draw_rows in branch_rows:
                    sink.extend(draw_rows)

        done = [r for branch_results in results for r in branch_results]
        succeeded = [r for r in done if r.ok]
        if not succeeded:
            reasons = "; ".join(r.describe_failure() for r in done)
            return StageOutcome(state, f"all {len(done)} parallel branches failed: {reasons}")
        new_state = state
        lead = next((r for r in succeeded if r.role is not Role.GUIDANCE), None)
        for result in succeeded:
            if result.role is Role.GUIDANCE or result is lead:
                new_state = _applied(new_state, result)
        with_text = [r for r in succeeded if r.output.text.strip()]
        return StageOutcome(
            new_state.with_candidates([r.output.text for r in with_text], [r.output.code for r in with_text])
        )

    async def _conditional(self, stage: ConditionalStage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        check = await self._caller.call(stage.check, state, sink=sink)
        after_check = _applied(state, check)
        if not check.ok:
            passed = True
            check.row.note = "the check itself failed, so it reported no failed check; the on_pass branch runs"
        elif check.output.verdict is None:
            passed = True
            check.row.note = "the check gave no verdict; treated as passed, so the on_pass branch runs"
        else:
            passed = check.output.verdict
            check.row.note = "check passed" if passed else "check failed"
        taken, untaken = (stage.on_pass, stage.on_fail) if passed else (stage.on_fail, stage.on_pass)
        outcome = StageOutcome(after_check)
        if taken is not None:
            result = await self._caller.call(taken, after_check, sink=sink)
            outcome = StageOutcome(_applied(after_check, result), None if result.ok else result.describe_failure())
        if untaken is not None:
            sink.append(
                NodeTrace(
                    node_id=untaken.id,
                    operator=untaken.operator,
                    ok=True,
                    skipped=True,
                    note=f"not taken: the check {'passed' if passed else 'failed'}",
                )
            )
        return outcome

    async def _loop(self, stage: LoopStage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        has_checker = any(
            (spec := self._caller.spec_of(node)) is not None and spec.role is Role.CHECKER for node in stage.body
        )
        last: NodeResult | None = None
        for iteration in range(1, stage.count + 1):
            last_check: NodeResult | None = None
            for node in stage.body:
                last = await self._caller.call(node, state, sink=sink, iteration=iteration)
                state = _applied(state, last)
                if last.role is Role.CHECKER:
                    last_check = last
            if has_checker and last_check is not None and last_check.ok and last_check.output.verdict is True:
                if iteration < stage.count:
                    last_check.row.note = f"check passed: the loop stops after iteration {iteration} of {stage.count}"
                break
        assert last is not None  # a loop body holds at least one node and count >= 1
        return StageOutcome(state, None if last.ok else last.describe_failure())

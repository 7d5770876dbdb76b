"""Parallel: branches run concurrently on the same state; the successful outputs become candidates.

A branch whose operator already occurred earlier in the stage is a sampled draw (see `branch_draws`); the
state continues as if the first successful non-guidance branch had run alone, plus every planner's guidance.
"""

from __future__ import annotations

import anyio

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import OperatorNode, ParallelStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState
from operators.base import Role


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


async def run_parallel(
    stage: ParallelStage, state: FlowState, sink: list[NodeTrace], caller: NodeCaller
) -> StageOutcome:
    plan = branch_draws(stage.branches)
    results: list[list[NodeResult]] = [[] for _ in stage.branches]
    rows: list[list[list[NodeTrace]]] = [[[] for _ in draws] for draws in plan]

    async def branch(index: int) -> None:
        node, draws = stage.branches[index], plan[index]
        if draws == [0]:
            results[index] = [await caller.call(node, state, sink=rows[index][0])]
        else:
            results[index] = await caller.call_draws(node, state, draws, sinks=rows[index])

    try:
        async with anyio.create_task_group() as group:
            for index in range(len(stage.branches)):
                group.start_soon(branch, index)
    finally:
        for branch_rows in rows:  # branch order, draw order, also when interrupted
            for draw_rows in branch_rows:
                sink.extend(draw_rows)

    return candidates_outcome(state, [r for branch_results in results for r in branch_results])


def candidates_outcome(state: FlowState, done: list[NodeResult]) -> StageOutcome:
    """The outcome of several calls on the same state (branches, draws): their successful texts become the next
    stage's candidates, and the state continues as if the first successful non-guidance call had run alone."""
    succeeded = [r for r in done if r.ok]
    if not succeeded:
        reasons = "; ".join(r.describe_failure() for r in done)
        return StageOutcome(state, f"all {len(done)} parallel branches failed: {reasons}", offers_candidates=True)
    new_state = state
    lead = next((r for r in succeeded if r.role is not Role.GUIDANCE), None)
    for result in succeeded:
        if result.role is Role.GUIDANCE or result is lead:
            new_state = applied(new_state, result)
    with_text = [r for r in succeeded if r.output.text.strip()]
    return StageOutcome(
        new_state.with_candidates([r.output.text for r in with_text], [r.output.code for r in with_text]),
        offers_candidates=True,
    )

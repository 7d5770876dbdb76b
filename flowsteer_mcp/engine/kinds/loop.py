"""Loop: the body runs up to `count` times; with a checker in the body it stops after the first iteration
whose last checker ran successfully with verdict True. Trace rows carry the 1-based iteration."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import LoopStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState
from operators.base import Role


async def run_loop(stage: LoopStage, state: FlowState, sink: list[NodeTrace], caller: NodeCaller) -> StageOutcome:
    has_checker = any((spec := caller.spec_of(node)) is not None and spec.role is Role.CHECKER for node in stage.body)
    last: NodeResult | None = None
    for iteration in range(1, stage.count + 1):
        last_check: NodeResult | None = None
        for node in stage.body:
            last = await caller.call(node, state, sink=sink, iteration=iteration)
            state = applied(state, last)
            if last.role is Role.CHECKER:
                last_check = last
        if has_checker and last_check is not None and last_check.ok and last_check.output.verdict is True:
            if iteration < stage.count:
                last_check.row.note = f"check passed: the loop stops after iteration {iteration} of {stage.count}"
            break
    assert last is not None  # a loop body holds at least one node and count >= 1
    return StageOutcome(state, None if last.ok else last.describe_failure())

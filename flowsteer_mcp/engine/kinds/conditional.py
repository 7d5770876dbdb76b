"""Conditional `C ? F : P`: F runs only when C reports a failed check (verdict False).

A check without a verdict (none given, or C itself failed) takes the pass branch and its row says so: F would
otherwise revise blind. F and P see the state after C; the untaken branch gets a skipped row.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import ConditionalStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied, skipped_row
from flowsteer_mcp.engine.node_call import NodeCaller
from flowsteer_mcp.engine.state import FlowState


async def run_conditional(
    stage: ConditionalStage, state: FlowState, sink: list[NodeTrace], caller: NodeCaller
) -> StageOutcome:
    check = await caller.call(stage.check, state, sink=sink)
    after_check = applied(state, check)
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
        result = await caller.call(taken, after_check, sink=sink)
        outcome = StageOutcome(applied(after_check, result), None if result.ok else result.describe_failure())
    if untaken is not None:
        sink.append(
            skipped_row(untaken.id, untaken.operator, f"not taken: the check {'passed' if passed else 'failed'}")
        )
    return outcome

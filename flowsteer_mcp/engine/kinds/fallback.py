"""Fallback `A ?? B`: A runs; B runs only when A failed or produced no answer (blank text and no code), on
the state after A (a failed A leaves it unchanged). When A answered, B gets a skipped row. The stage fails only
when the last node it ran failed, like every other kind."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import FallbackStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied, skipped_row
from flowsteer_mcp.engine.node_call import NodeCaller
from flowsteer_mcp.engine.state import FlowState


async def run_fallback(
    stage: FallbackStage, state: FlowState, sink: list[NodeTrace], caller: NodeCaller
) -> StageOutcome:
    attempt = await caller.call(stage.attempt, state, sink=sink)
    after = applied(state, attempt)
    output = attempt.output
    if attempt.ok and (output.text.strip() or (output.code or "").strip()):
        attempt.row.note = "answered, so the fallback is skipped"
        sink.append(skipped_row(stage.fallback.id, stage.fallback.operator, f"not taken: {stage.attempt.id} answered"))
        return StageOutcome(after)
    attempt.row.note = ("failed" if not attempt.ok else "gave no answer") + ", so the fallback runs"
    result = await caller.call(stage.fallback, after, sink=sink)
    return StageOutcome(applied(after, result), None if result.ok else result.describe_failure())

"""Operator: one node call; a node with `samples: k > 1` runs as a parallel stage of itself (k candidates)."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import OperatorNode, ParallelStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied
from flowsteer_mcp.engine.kinds.parallel import run_parallel
from flowsteer_mcp.engine.node_call import NodeCaller
from flowsteer_mcp.engine.state import FlowState


async def run_operator(node: OperatorNode, state: FlowState, sink: list[NodeTrace], caller: NodeCaller) -> StageOutcome:
    if node.samples > 1:  # k draws of itself, as a parallel stage
        return await run_parallel(ParallelStage(id=node.id, branches=[node]), state, sink, caller)
    result = await caller.call(node, state, sink=sink)
    return StageOutcome(applied(state, result), None if result.ok else result.describe_failure())

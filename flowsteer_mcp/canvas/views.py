"""Read-only views of a workflow's state: the typed state view, its statistics and the advisory hint.

The feedback step and the MCP resources both read these, so what a policy reads and what a client gets typed
are the same facts. Nothing here changes the state.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.blueprint import blueprint_of, slots
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.finish import finish_violations
from flowsteer_mcp.canvas.hints import Hint, advise
from flowsteer_mcp.canvas.model import OperatorNode, Stage, children
from flowsteer_mcp.canvas.state import CanvasState
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.step import NodeView, StateView
from operators.registry import OperatorRegistry


def slots_of_stage(stage: Stage) -> list[str]:
    return [s.role for s in slots(blueprint_of(stage))]


def node_views(state: CanvasState) -> list[NodeView]:
    """Every node in stage order, each structure before its children."""
    nodes: list[NodeView] = []
    for stage in state.graph.stages:
        if isinstance(stage, OperatorNode):
            nodes.append(NodeView(id=stage.id, kind="operator", operator=stage.operator, prompt=stage.prompt))
            continue
        nodes.append(NodeView(id=stage.id, kind=stage.kind, count=getattr(stage, "count", None)))
        for slot, child in zip(slots_of_stage(stage), children(stage), strict=True):
            nodes.append(
                NodeView(
                    id=child.id,
                    kind="operator",
                    operator=child.operator,
                    parent=stage.id,
                    slot=slot,
                    prompt=child.prompt,
                )
            )
    return nodes


def state_view(state: CanvasState, registry: OperatorRegistry) -> StateView:
    return StateView(
        dsl=render(state.graph),
        nodes=node_views(state),
        stats=graph_stats(state.graph, registry),
        round=state.rounds_used,
        max_rounds=state.options.max_rounds,
        status=state.status,
        awaiting_prompt_for=state.pending.request() if state.pending is not None else None,
    )


def next_hint(state: CanvasState, registry: OperatorRegistry) -> Hint | None:
    """The advisory next step (None when hints are off); its BLOCK_FINISH comes from the real finish gate."""
    if not state.options.hints:
        return None
    stats = graph_stats(state.graph, registry)
    output = state.last_execution.output if state.last_execution else None
    policy = state.options.finish_policy()
    violations = finish_violations(policy, stats, state.task, output, registry=registry)
    return advise(state.graph, stats, state.task, violations, state.last_execution, policy, registry=registry)


__all__ = ["next_hint", "node_views", "slots_of_stage", "state_view"]

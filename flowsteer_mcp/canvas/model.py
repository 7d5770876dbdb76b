"""The typed workflow graph: an ordered list of stages whose children are operator nodes.

Each stage kind (its model, blueprint and rules) lives in `canvas/kinds/`; this module holds the graph and
the traversals every caller uses (`children`, `operator_nodes`, `locate`), which ask the stage's kind.

Ids, counts and the id counter are bounded, so a graph read from an import or a store can always be
rendered and extended (an unbounded `next_index` would make every later id unprintable).
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.kinds import (
    ConditionalStage,
    FallbackStage,
    LoopStage,
    ParallelStage,
    Stage,
    kind_of,
)
from flowsteer_mcp.canvas.kinds.node import MAX_NODE_ID_CHARS, MAX_SAMPLES, NodeId, OperatorNode
from flowsteer_mcp.canvas.numbers import MAX_NUMBER


def children(stage: Stage) -> list[OperatorNode]:
    """The operator nodes directly inside a stage, in execution/display order (empty for an operator)."""
    return kind_of(stage).children(stage)


def operator_nodes(stage: Stage) -> list[OperatorNode]:
    """Every operator node of a stage: itself for an operator stage, its children otherwise."""
    return [stage] if isinstance(stage, OperatorNode) else children(stage)


class NodeLocation(BaseModel):
    """Where a node id lives: the index of its top-level stage and, for a child, the child node."""

    stage_index: int
    stage: Stage
    child: OperatorNode | None = None

    @property
    def node(self) -> Stage:
        return self.child if self.child is not None else self.stage


class WorkflowGraph(BaseModel):
    """The canvas state proper. `next_index` only grows, so a node id is never handed out twice; it stays at or
    below MAX_NUMBER (the add that would pass it is refused)."""

    model_config = ConfigDict(extra="forbid")

    stages: list[Stage] = Field(default_factory=list)
    next_index: int = Field(default=1, ge=1, le=MAX_NUMBER)

    def iter_operator_nodes(self) -> Iterator[OperatorNode]:
        for stage in self.stages:
            yield from operator_nodes(stage)

    def locate(self, node_id: str) -> NodeLocation | None:
        for index, stage in enumerate(self.stages):
            if stage.id == node_id:
                return NodeLocation(stage_index=index, stage=stage)
            for child in children(stage):
                if child.id == node_id:
                    return NodeLocation(stage_index=index, stage=stage, child=child)
        return None

    def node_ids(self) -> list[str]:
        ids: list[str] = []
        for stage in self.stages:
            ids.append(stage.id)
            ids.extend(child.id for child in children(stage))
        return ids

    @property
    def is_empty(self) -> bool:
        return not self.stages


__all__ = [
    "MAX_NODE_ID_CHARS",
    "MAX_SAMPLES",
    "ConditionalStage",
    "FallbackStage",
    "LoopStage",
    "NodeId",
    "NodeLocation",
    "OperatorNode",
    "ParallelStage",
    "Stage",
    "WorkflowGraph",
    "children",
    "operator_nodes",
]

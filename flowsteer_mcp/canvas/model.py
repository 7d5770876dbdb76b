"""The typed workflow graph: an ordered list of stages whose children are operator nodes.

Children are typed as `OperatorNode` today; every traversal goes through `children()` so that nested
structures could be added later by widening that type, without touching the callers.

Ids, counts and the id counter are bounded here, so a graph read from an import or a store can always be
rendered and extended (an unbounded `next_index` would make every later id unprintable).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.numbers import MAX_NUMBER

MAX_NODE_ID_CHARS = 64
MAX_SAMPLES = 16  # draws per node: bounds the cost of one node to 16 operator calls
NodeId = Annotated[str, Field(min_length=1, max_length=MAX_NODE_ID_CHARS)]


class OperatorNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["operator"] = "operator"
    id: NodeId
    operator: str
    prompt: str | None = None
    # k > 1: the node runs k times on the same input (draw 1 greedy, the others sampled) and its k outputs
    # become candidates for the next stage, like k parallel branches of itself.
    samples: int = Field(default=1, ge=1, le=MAX_SAMPLES)


class ParallelStage(BaseModel):
    """Branches run concurrently on the same input; the stage yields their outputs as candidates."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["parallel"] = "parallel"
    id: NodeId
    branches: list[OperatorNode]


class ConditionalStage(BaseModel):
    """`check ? on_fail : on_pass`: run the checker; if its check FAILS run on_fail, else on_pass (or nothing)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["conditional"] = "conditional"
    id: NodeId
    check: OperatorNode
    on_fail: OperatorNode
    on_pass: OperatorNode | None = None


class LoopStage(BaseModel):
    """The body runs up to `count` times; it stops early after an iteration whose checker passed."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["loop"] = "loop"
    id: NodeId
    body: list[OperatorNode]
    count: int = Field(ge=1, le=MAX_NUMBER)


Stage = Annotated[OperatorNode | ParallelStage | ConditionalStage | LoopStage, Field(discriminator="kind")]
StageKind = Literal["operator", "parallel", "conditional", "loop"]


def children(stage: Stage) -> list[OperatorNode]:
    """The operator nodes directly inside a stage, in execution/display order (empty for an operator)."""
    if isinstance(stage, ParallelStage):
        return list(stage.branches)
    if isinstance(stage, ConditionalStage):
        return [stage.check, stage.on_fail] + ([stage.on_pass] if stage.on_pass else [])
    if isinstance(stage, LoopStage):
        return list(stage.body)
    return []


def operator_nodes(stage: Stage) -> list[OperatorNode]:
    """Every operator node of a stage: itself for an operator stage, its children otherwise."""
    return [stage] if isinstance(stage, OperatorNode) else children(stage)


class NodeLocation(BaseModel):
    """Where a node id lives: the index of its top-level stage and, for a child, the child node."""

    stage_index: int
    stage: Stage
    child: OperatorNode | None = None

    @property
    def node(self) -> OperatorNode | ParallelStage | ConditionalStage | LoopStage:
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

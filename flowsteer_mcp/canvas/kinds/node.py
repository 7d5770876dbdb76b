"""The operator node: the leaf every stage kind is made of (and, alone, the `operator` stage itself).

Ids and draws are bounded here, so a graph read from an import or a store can always be rendered and run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from operators.stopping import StopRuleName

MAX_NODE_ID_CHARS = 64
MAX_SAMPLES = 16  # draws per node: bounds the cost of one node to 16 operator calls
NodeId = Annotated[str, Field(min_length=1, max_length=MAX_NODE_ID_CHARS)]


class StageModel(BaseModel):
    """Base of every stage model: `kind` names its registered kind (what validation dispatches on) and `id` is
    the stage's node id. Each kind narrows `kind` to `Literal["<name>"] = "<name>"`."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    id: NodeId


class OperatorNode(StageModel):
    kind: Literal["operator"] = "operator"
    id: NodeId
    operator: str
    prompt: str | None = None
    # k > 1: the node runs k times on the same input (draw 1 greedy, the others sampled) and its k outputs
    # become candidates for the next stage, like k parallel branches of itself.
    samples: int = Field(default=1, ge=1, le=MAX_SAMPLES)
    # With samples k > 1: draw in waves and stop once the rule says more draws could not change the pick
    # (operators/stopping.py): "tests", the greedy program passes the public tests; "vote", the vote is decisive.
    until: StopRuleName | None = None

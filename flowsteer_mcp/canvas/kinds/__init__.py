"""Stage kinds and their registration: the only place that lists them.

Adding a kind: write its module here (a `StageKind` subclass with its `is_structure`, its stage and blueprint
models), add it to `Stage`, `StageBlueprint`, `StageKindName` (and `StructureKindName` for a structure) and
`KINDS` below, and give the engine its executor in `flowsteer_mcp/engine/kinds/` (registered in that package's
`EXECUTORS`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from flowsteer_mcp.canvas.kinds.base import AnyKind
from flowsteer_mcp.canvas.kinds.conditional import CONDITIONAL, ConditionalBlueprint, ConditionalStage
from flowsteer_mcp.canvas.kinds.fallback import FALLBACK, FallbackBlueprint, FallbackStage
from flowsteer_mcp.canvas.kinds.loop import LOOP, LoopBlueprint, LoopStage
from flowsteer_mcp.canvas.kinds.node import OperatorNode
from flowsteer_mcp.canvas.kinds.operator import OPERATOR, OperatorBlueprint
from flowsteer_mcp.canvas.kinds.parallel import PARALLEL, ParallelBlueprint, ParallelStage

Stage = Annotated[
    OperatorNode | ParallelStage | ConditionalStage | LoopStage | FallbackStage, Field(discriminator="kind")
]
StageBlueprint = Annotated[
    OperatorBlueprint | ParallelBlueprint | ConditionalBlueprint | LoopBlueprint | FallbackBlueprint,
    Field(discriminator="kind"),
]
StageKindName = Literal["operator", "parallel", "conditional", "loop", "fallback"]
StructureKindName = Literal["parallel", "conditional", "loop", "fallback"]  # the kinds with `is_structure`

KINDS: dict[str, AnyKind] = {kind.name: kind for kind in (OPERATOR, PARALLEL, CONDITIONAL, LOOP, FALLBACK)}
# The control structures, in registration order: what graph statistics list, the finish gate requires and the
# reward scores, all decided by each kind's `is_structure`.
STRUCTURES: tuple[AnyKind, ...] = tuple(kind for kind in KINDS.values() if kind.is_structure)


def kind_of(item: Any) -> AnyKind:
    """The kind of a stage or a blueprint (both carry their kind's name in `kind`)."""
    return KINDS[item.kind]


__all__ = [
    "KINDS",
    "STRUCTURES",
    "ConditionalBlueprint",
    "ConditionalStage",
    "FallbackBlueprint",
    "FallbackStage",
    "LoopBlueprint",
    "LoopStage",
    "OperatorBlueprint",
    "OperatorNode",
    "ParallelBlueprint",
    "ParallelStage",
    "Stage",
    "StageBlueprint",
    "StageKindName",
    "StructureKindName",
    "kind_of",
]

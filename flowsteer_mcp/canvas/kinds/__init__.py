"""Stage kinds: the contract (`base.py`), the registry (`registry.py`) and the five built-in kinds.

Adding a kind: write a `StageKind` subclass (its stage model derives from `StageModel`, its blueprint from
`KindBlueprint`, each with `kind: Literal["<name>"] = "<name>"`), call `register_kind(...)` with an instance,
and give the engine its stage runner (`flowsteer_mcp.engine.kinds.register_stage_runner`). Nothing else changes: every
module reads the registry when it runs (docs/design/canvas.md, "Adding a kind").
"""

from __future__ import annotations

from typing import Any

from flowsteer_mcp.canvas.kinds.base import AnyKind, KindBlueprint, StageKind
from flowsteer_mcp.canvas.kinds.conditional import CONDITIONAL, ConditionalBlueprint, ConditionalStage
from flowsteer_mcp.canvas.kinds.dispatch import Stage, StageBlueprint
from flowsteer_mcp.canvas.kinds.drawing import Drawing
from flowsteer_mcp.canvas.kinds.fallback import FALLBACK, FallbackBlueprint, FallbackStage
from flowsteer_mcp.canvas.kinds.loop import LOOP, LoopBlueprint, LoopStage
from flowsteer_mcp.canvas.kinds.node import OperatorNode, StageModel
from flowsteer_mcp.canvas.kinds.operator import OPERATOR, OperatorBlueprint
from flowsteer_mcp.canvas.kinds.parallel import PARALLEL, ParallelBlueprint, ParallelStage
from flowsteer_mcp.canvas.kinds.registry import (
    KINDS,
    REGISTRY,
    STRUCTURES,
    KindRegistrationError,
    UnknownKindError,
    get_kind,
    kinds,
    register_kind,
    registered_kind,
    registry_version,
    structure_kinds,
    unregister_kind,
)

for _builtin in (OPERATOR, PARALLEL, CONDITIONAL, LOOP, FALLBACK):
    REGISTRY.register(_builtin, builtin=True)


def kind_of(item: Any) -> AnyKind:
    """The kind of a stage or a blueprint (both carry their kind's name in `kind`)."""
    return REGISTRY.get(item.kind)


__all__ = [
    "KINDS",
    "STRUCTURES",
    "AnyKind",
    "ConditionalBlueprint",
    "ConditionalStage",
    "Drawing",
    "FallbackBlueprint",
    "FallbackStage",
    "KindBlueprint",
    "KindRegistrationError",
    "LoopBlueprint",
    "LoopStage",
    "OperatorBlueprint",
    "OperatorNode",
    "ParallelBlueprint",
    "ParallelStage",
    "Stage",
    "StageBlueprint",
    "StageKind",
    "StageModel",
    "UnknownKindError",
    "get_kind",
    "kind_of",
    "kinds",
    "register_kind",
    "registered_kind",
    "registry_version",
    "structure_kinds",
    "unregister_kind",
]

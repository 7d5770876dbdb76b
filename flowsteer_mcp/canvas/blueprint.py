"""Stage blueprints: a stage as requested (operators, prompts, count), before it gets node ids.

Typed add actions, the dialect and the DSL parser all produce blueprints; `build_stage` turns a validated
blueprint into graph nodes with ids derived from the workflow's monotonic counter. Each function asks the
blueprint's kind (`canvas/kinds/`), so none of them changes when a kind is added.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.kinds import (
    ConditionalBlueprint,
    FallbackBlueprint,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
    Stage,
    StageBlueprint,
    kind_of,
)
from flowsteer_mcp.canvas.kinds.base import Slot
from flowsteer_mcp.canvas.kinds.node import OperatorNode


def slots(blueprint: StageBlueprint) -> list[Slot]:
    return kind_of(blueprint).slots(blueprint)


def slot_prompts(blueprint: StageBlueprint) -> list[str | None]:
    """Prompts aligned with `slots(blueprint)` (None where none was given)."""
    return kind_of(blueprint).slot_prompts(blueprint)


def slot_samples(blueprint: StageBlueprint) -> list[int]:
    """Draws per slot, aligned with `slots(blueprint)`; only operator stages and parallel branches sample."""
    return kind_of(blueprint).slot_samples(blueprint)


def with_prompts(blueprint: StageBlueprint, prompts: list[str | None]) -> StageBlueprint:
    result: StageBlueprint = kind_of(blueprint).with_prompts(blueprint, prompts)
    return result


def with_samples(blueprint: StageBlueprint, samples: list[int]) -> StageBlueprint:
    """The same blueprint with these draws per slot (kinds whose children sample only)."""
    result: StageBlueprint = kind_of(blueprint).with_samples(blueprint, samples)
    return result


def with_operators(blueprint: StageBlueprint, names: list[str]) -> StageBlueprint:
    """The same blueprint with its slot operators replaced (used to canonicalise spelling)."""
    result: StageBlueprint = kind_of(blueprint).with_operators(blueprint, names)
    return result


def stage_id(index: int) -> str:
    return f"node_{index}"


def build_stage(blueprint: StageBlueprint, index: int) -> Stage:
    """Materialise a validated blueprint as stage `node_<index>`."""
    base = stage_id(index)
    nodes = [
        OperatorNode(id=base + slot.suffix, operator=slot.operator, prompt=prompt, samples=samples)
        for slot, prompt, samples in zip(
            slots(blueprint), slot_prompts(blueprint), slot_samples(blueprint), strict=True
        )
    ]
    stage: Stage = kind_of(blueprint).build(blueprint, base, nodes)
    return stage


def blueprint_of(stage: Stage) -> StageBlueprint:
    """The blueprint that would rebuild `stage` (ids aside)."""
    result: StageBlueprint = kind_of(stage).blueprint_of(stage)
    return result


__all__ = [
    "ConditionalBlueprint",
    "FallbackBlueprint",
    "LoopBlueprint",
    "OperatorBlueprint",
    "ParallelBlueprint",
    "Slot",
    "StageBlueprint",
    "blueprint_of",
    "build_stage",
    "slot_prompts",
    "slot_samples",
    "slots",
    "stage_id",
    "with_operators",
    "with_prompts",
    "with_samples",
]

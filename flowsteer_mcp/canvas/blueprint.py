"""Stage blueprints: a stage as requested (operators, prompts, count), before it gets node ids.

Typed add actions, the dialect and the DSL parser all produce blueprints; `build_stage` turns a validated
blueprint into graph nodes with ids derived from the workflow's monotonic counter.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.model import ConditionalStage, LoopStage, OperatorNode, ParallelStage, Stage


class _Blueprint(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OperatorBlueprint(_Blueprint):
    kind: Literal["operator"] = "operator"
    operator: str
    prompt: str | None = None
    samples: int = 1  # draws of the node (bounded by CanvasRules, with an actionable error)


class ParallelBlueprint(_Blueprint):
    kind: Literal["parallel"] = "parallel"
    operators: list[str]
    prompts: list[str | None] | None = None
    samples: list[int] | None = None  # per branch (None: one draw each)


class ConditionalBlueprint(_Blueprint):
    kind: Literal["conditional"] = "conditional"
    check: str
    on_fail: str
    on_pass: str | None = None  # None = "done"
    prompts: list[str | None] | None = None  # in slot order: check, on_fail, on_pass


class LoopBlueprint(_Blueprint):
    kind: Literal["loop"] = "loop"
    operators: list[str]
    count: int
    prompts: list[str | None] | None = None


StageBlueprint = Annotated[
    OperatorBlueprint | ParallelBlueprint | ConditionalBlueprint | LoopBlueprint, Field(discriminator="kind")
]


class Slot(BaseModel):
    """One operator position of a blueprint, with the id suffix its node will get."""

    suffix: str  # "" for a single operator stage
    role: str  # "operator" | "branch i/n" | "check" | "on_fail" | "on_pass" | "body i/n"
    operator: str


def slots(blueprint: StageBlueprint) -> list[Slot]:
    if isinstance(blueprint, OperatorBlueprint):
        return [Slot(suffix="", role="operator", operator=blueprint.operator)]
    if isinstance(blueprint, ParallelBlueprint):
        n = len(blueprint.operators)
        return [
            Slot(suffix=f"_p{i}", role=f"branch {i + 1}/{n}", operator=op) for i, op in enumerate(blueprint.operators)
        ]
    if isinstance(blueprint, ConditionalBlueprint):
        result = [
            Slot(suffix="_cond", role="check", operator=blueprint.check),
            Slot(suffix="_fail", role="on_fail", operator=blueprint.on_fail),
        ]
        if blueprint.on_pass is not None:
            result.append(Slot(suffix="_pass", role="on_pass", operator=blueprint.on_pass))
        return result
    n = len(blueprint.operators)
    return [Slot(suffix=f"_l{i}", role=f"body {i + 1}/{n}", operator=op) for i, op in enumerate(blueprint.operators)]


def slot_prompts(blueprint: StageBlueprint) -> list[str | None]:
    """Prompts aligned with `slots(blueprint)` (None where none was given)."""
    count = len(slots(blueprint))
    if isinstance(blueprint, OperatorBlueprint):
        return [blueprint.prompt]
    given = list(blueprint.prompts or [])
    return (given + [None] * count)[:count]


def slot_samples(blueprint: StageBlueprint) -> list[int]:
    """Draws per slot, aligned with `slots(blueprint)`; only operator stages and parallel branches sample."""
    count = len(slots(blueprint))
    if isinstance(blueprint, OperatorBlueprint):
        return [blueprint.samples]
    if isinstance(blueprint, ParallelBlueprint):
        return (list(blueprint.samples or []) + [1] * count)[:count]
    return [1] * count


def with_prompts(blueprint: StageBlueprint, prompts: list[str | None]) -> StageBlueprint:
    if isinstance(blueprint, OperatorBlueprint):
        return blueprint.model_copy(update={"prompt": prompts[0]})
    return blueprint.model_copy(update={"prompts": list(prompts)})


def with_operators(blueprint: StageBlueprint, names: list[str]) -> StageBlueprint:
    """The same blueprint with its slot operators replaced (used to canonicalise spelling)."""
    if isinstance(blueprint, OperatorBlueprint):
        return blueprint.model_copy(update={"operator": names[0]})
    if isinstance(blueprint, ConditionalBlueprint):
        on_pass = names[2] if len(names) > 2 else None
        return blueprint.model_copy(update={"check": names[0], "on_fail": names[1], "on_pass": on_pass})
    return blueprint.model_copy(update={"operators": list(names)})


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
    if isinstance(blueprint, OperatorBlueprint):
        return nodes[0]
    if isinstance(blueprint, ParallelBlueprint):
        return ParallelStage(id=base, branches=nodes)
    if isinstance(blueprint, ConditionalBlueprint):
        return ConditionalStage(id=base, check=nodes[0], on_fail=nodes[1], on_pass=nodes[2] if len(nodes) > 2 else None)
    return LoopStage(id=base, body=nodes, count=blueprint.count)


def blueprint_of(stage: Stage) -> StageBlueprint:
    """The blueprint that would rebuild `stage` (ids aside)."""
    if isinstance(stage, ParallelStage):
        samples = [b.samples for b in stage.branches]
        return ParallelBlueprint(
            operators=[b.operator for b in stage.branches],
            prompts=[b.prompt for b in stage.branches],
            samples=samples if any(k > 1 for k in samples) else None,
        )
    if isinstance(stage, ConditionalStage):
        nodes = [stage.check, stage.on_fail] + ([stage.on_pass] if stage.on_pass else [])
        return ConditionalBlueprint(
            check=stage.check.operator,
            on_fail=stage.on_fail.operator,
            on_pass=stage.on_pass.operator if stage.on_pass else None,
            prompts=[n.prompt for n in nodes],
        )
    if isinstance(stage, LoopStage):
        return LoopBlueprint(
            operators=[b.operator for b in stage.body], count=stage.count, prompts=[b.prompt for b in stage.body]
        )
    assert isinstance(stage, OperatorNode)
    return OperatorBlueprint(operator=stage.operator, prompt=stage.prompt, samples=stage.samples)

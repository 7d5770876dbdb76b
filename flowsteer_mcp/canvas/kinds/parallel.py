"""The `parallel` kind: branches run concurrently on the same input (`[A, B{3}]` in the DSL); their outputs
become candidates for the next stage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds.base import (
    Box,
    DslReader,
    KindBlueprint,
    MermaidPart,
    Slot,
    StageKind,
    StructureArgs,
    TagReader,
)
from flowsteer_mcp.canvas.kinds.drawing import BRANCHES, Drawing
from flowsteer_mcp.canvas.kinds.node import NodeId, OperatorNode, StageModel
from flowsteer_mcp.canvas.kinds.operator import render_drawn

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules


class ParallelStage(StageModel):
    """Branches run concurrently on the same input; the stage yields their outputs as candidates."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["parallel"] = "parallel"
    id: NodeId
    branches: list[OperatorNode]


class ParallelBlueprint(KindBlueprint):
    kind: Literal["parallel"] = "parallel"
    operators: list[str]
    prompts: list[str | None] | None = None
    samples: list[int] | None = None  # per branch (None: one draw each)


class ParallelKind(StageKind[ParallelStage, ParallelBlueprint]):
    name = "parallel"
    is_structure = True
    stage_type = ParallelStage
    blueprint_type = ParallelBlueprint
    summary = "2 or more branches run on the same input; follow it with an ensemble (ScEnsemble, Aggregate)"
    dialect_help = (
        "- Add a parallel stage (2 or more branches run on the same input; follow it with ScEnsemble or Aggregate):\n"
        "  <action>add</action><structure>parallel</structure><operators>A, B</operators>"
    )
    milestone_bonus = 0.2
    dsl_opener = "["
    dsl_tokens = ("[", "]", ",", "{", "}")
    child_samples = True
    offers_candidates = True

    def slots(self, blueprint: ParallelBlueprint) -> list[Slot]:
        n = len(blueprint.operators)
        return [
            Slot(suffix=f"_p{i}", role=f"branch {i + 1}/{n}", operator=op) for i, op in enumerate(blueprint.operators)
        ]

    def slot_samples(self, blueprint: ParallelBlueprint) -> list[int]:
        count = len(blueprint.operators)
        return (list(blueprint.samples or []) + [1] * count)[:count]

    def with_samples(self, blueprint: ParallelBlueprint, samples: list[int]) -> ParallelBlueprint:
        return blueprint.model_copy(update={"samples": list(samples)})

    def with_operators(self, blueprint: ParallelBlueprint, names: list[str]) -> ParallelBlueprint:
        return blueprint.model_copy(update={"operators": list(names)})

    def build(self, blueprint: ParallelBlueprint, stage_id: str, nodes: list[OperatorNode]) -> ParallelStage:
        return ParallelStage(id=stage_id, branches=nodes)

    def children(self, stage: ParallelStage) -> list[OperatorNode]:
        return list(stage.branches)

    def blueprint_of(self, stage: ParallelStage) -> ParallelBlueprint:
        samples = [b.samples for b in stage.branches]
        return ParallelBlueprint(
            operators=[b.operator for b in stage.branches],
            prompts=[b.prompt for b in stage.branches],
            samples=samples if any(k > 1 for k in samples) else None,
        )

    def validate(self, blueprint: ParallelBlueprint, rules: CanvasRules) -> None:
        limit = rules.limits.max_branches
        if not 2 <= len(blueprint.operators) <= limit:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"A parallel stage needs 2 to {limit} branches; got {len(blueprint.operators)}.",
            )
        ensembles = [n for n in blueprint.operators if rules.registry.spec(n).needs_candidates]
        if ensembles:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"{', '.join(sorted(set(ensembles)))} cannot be a parallel branch: ensemble operators combine the "
                "candidates of a parallel stage, so add them as the stage after it.",
            )

    def validate_samples(self, blueprint: ParallelBlueprint, rules: CanvasRules) -> None:
        given = blueprint.samples or []
        if len(given) > len(blueprint.operators):
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"Got {len(given)} samples values for {len(blueprint.operators)} branches; give at most one "
                "per branch.",
            )
        for index, value in enumerate(self.slot_samples(blueprint), start=1):
            rules.samples(value, f" of branch {index}")

    def without_child(self, stage: ParallelStage, child_id: str) -> ParallelStage | None:
        if len(stage.branches) <= 2:
            return None
        return stage.model_copy(update={"branches": [b for b in stage.branches if b.id != child_id]})

    def describe(self, blueprint: ParallelBlueprint) -> str:
        return f"parallel [{', '.join(blueprint.operators)}]"

    def planned_calls(self, stage: ParallelStage) -> int:
        return sum(branch.samples for branch in stage.branches)

    def render_dsl(self, stage: ParallelStage) -> str:
        return "[" + ", ".join(render_drawn(b) for b in stage.branches) + "]"

    def parse_dsl_prefix(self, reader: DslReader) -> ParallelBlueprint:
        ops = [reader.operator()]
        draws = [reader.samples()]
        while reader.at(","):
            reader.expect(",")
            ops.append(reader.operator())
            draws.append(reader.samples())
        reader.expect("]")
        return ParallelBlueprint(operators=ops, samples=draws if any(k != 1 for k in draws) else None)

    def mermaid(self, stage: ParallelStage, box: Box) -> MermaidPart:
        ids = [b.id for b in stage.branches]
        return MermaidPart(lines=[box(b) for b in stage.branches], entry=ids, exits=list(ids))

    def from_tags(self, tags: TagReader) -> ParallelBlueprint:
        return ParallelBlueprint(operators=tags.operators("operators", "a parallel structure lists its branches"))

    def to_tags(self, blueprint: ParallelBlueprint, *, inline_prompt: bool = False) -> str:
        return f"<structure>{self.name}</structure><operators>{', '.join(blueprint.operators)}</operators>"

    def drawing(self, stage: ParallelStage) -> Drawing:
        return Drawing(BRANCHES, tuple(stage.branches), caption=self.name)

    def from_tool(self, args: StructureArgs) -> ParallelBlueprint:
        operators = args.operator_list(self.name)
        args.no_count()
        return ParallelBlueprint(operators=operators, prompts=args.prompts)


PARALLEL = ParallelKind()

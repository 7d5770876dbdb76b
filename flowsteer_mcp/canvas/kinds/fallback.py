"""The `fallback` kind: `A ?? B` runs A; only when A failed or produced no answer (a blank output) does B run,
on the same input. Why: a cheap or risky operator can be tried first without betting the run on it, e.g.
`Programmer ?? Custom` keeps a text answer when the program crashes. B is reported skipped when A answered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds.base import (
    Box,
    DslReader,
    DSLSyntaxError,
    KindBlueprint,
    MermaidPart,
    Slot,
    StageKind,
    StructureArgs,
    TagReader,
)
from flowsteer_mcp.canvas.kinds.drawing import CHECK, Drawing
from flowsteer_mcp.canvas.kinds.node import NodeId, OperatorNode, StageModel

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules


class FallbackStage(StageModel):
    """`attempt ?? fallback`: the fallback runs only when the attempt failed or gave a blank output."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["fallback"] = "fallback"
    id: NodeId
    attempt: OperatorNode
    fallback: OperatorNode


class FallbackBlueprint(KindBlueprint):
    kind: Literal["fallback"] = "fallback"
    operators: list[str]  # exactly two: the attempt, then the fallback
    prompts: list[str | None] | None = None


_NAMED_SLOTS = (("_try", "try"), ("_else", "else"))


def _slot(index: int, operator: str) -> Slot:
    suffix, role = _NAMED_SLOTS[index] if index < len(_NAMED_SLOTS) else (f"_else{index}", f"else {index}")
    return Slot(suffix=suffix, role=role, operator=operator)


class FallbackKind(StageKind[FallbackStage, FallbackBlueprint]):
    name = "fallback"
    is_structure = True
    stage_type = FallbackStage
    blueprint_type = FallbackBlueprint
    summary = "`A ?? B`: run A; run B only when A failed or produced no answer (operators: [A, B])"
    dialect_help = (
        "- Add a fallback `A ?? B` (runs A; runs B only when A failed or produced no answer, otherwise B is "
        "skipped):\n  <action>add</action><structure>fallback</structure><operators>A, B</operators>"
    )
    dsl_infix = "??"
    dsl_tokens = ("??",)

    def slots(self, blueprint: FallbackBlueprint) -> list[Slot]:
        # One slot per given operator, so validation sees (and refuses) a wrong count instead of a truncation.
        return [_slot(index, op) for index, op in enumerate(blueprint.operators)]

    def with_operators(self, blueprint: FallbackBlueprint, names: list[str]) -> FallbackBlueprint:
        return blueprint.model_copy(update={"operators": list(names)})

    def build(self, blueprint: FallbackBlueprint, stage_id: str, nodes: list[OperatorNode]) -> FallbackStage:
        return FallbackStage(id=stage_id, attempt=nodes[0], fallback=nodes[1])

    def children(self, stage: FallbackStage) -> list[OperatorNode]:
        return [stage.attempt, stage.fallback]

    def blueprint_of(self, stage: FallbackStage) -> FallbackBlueprint:
        nodes = self.children(stage)
        return FallbackBlueprint(operators=[n.operator for n in nodes], prompts=[n.prompt for n in nodes])

    def validate(self, blueprint: FallbackBlueprint, rules: CanvasRules) -> None:
        if len(blueprint.operators) != 2:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"A fallback needs exactly 2 operators (the attempt, then the one run when it gives no answer); "
                f"got {len(blueprint.operators)}.",
            )

    def describe(self, blueprint: FallbackBlueprint) -> str:
        return f"fallback {' ?? '.join(blueprint.operators)}"

    def planned_calls(self, stage: FallbackStage) -> int:
        return 2  # the attempt plus at most the fallback

    def render_dsl(self, stage: FallbackStage) -> str:
        return f"{stage.attempt.operator} ?? {stage.fallback.operator}"

    def parse_dsl_infix(self, reader: DslReader, first: str, drawn: int) -> FallbackBlueprint:
        if drawn != 1:
            raise DSLSyntaxError("samples ({k}) are not allowed inside a fallback")
        second = reader.operator()
        reader.no_samples("inside a fallback")
        return FallbackBlueprint(operators=[first, second])

    def mermaid(self, stage: FallbackStage, box: Box) -> MermaidPart:
        attempt, fallback = stage.attempt, stage.fallback
        lines = [box(attempt), box(fallback), f"    {attempt.id} -- no answer --> {fallback.id}"]
        return MermaidPart(lines=lines, entry=[attempt.id], exits=[attempt.id, fallback.id])

    def from_tags(self, tags: TagReader) -> FallbackBlueprint:
        return FallbackBlueprint(
            operators=tags.operators("operators", "a fallback lists the attempt, then the operator run if it fails")
        )

    def to_tags(self, blueprint: FallbackBlueprint, *, inline_prompt: bool = False) -> str:
        return f"<structure>{self.name}</structure><operators>{', '.join(blueprint.operators)}</operators>"

    def drawing(self, stage: FallbackStage) -> Drawing:
        return Drawing(CHECK, (stage.attempt, stage.fallback), caption=self.name, labels=("A answered", "if A fails"))

    def from_tool(self, args: StructureArgs) -> FallbackBlueprint:
        operators = args.operator_list(self.name)
        args.no_count()
        return FallbackBlueprint(operators=operators, prompts=args.prompts)


FALLBACK = FallbackKind()

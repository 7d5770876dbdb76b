"""The `loop` kind: `(A -> B) * n` runs the body up to n times, stopping after an iteration whose checker
passed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds.base import (
    Box,
    DslReader,
    KindBlueprint,
    MermaidPart,
    Slot,
    StageKind,
    StructureArgs,
    StructureArgsError,
    TagReader,
)
from flowsteer_mcp.canvas.kinds.drawing import REPEAT, Drawing
from flowsteer_mcp.canvas.kinds.node import NodeId, OperatorNode, StageModel
from flowsteer_mcp.canvas.numbers import MAX_NUMBER, show_int

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules

DEFAULT_LOOP_COUNT = 3  # iterations of a dialect loop written without <count>
_ARROW = " -> "


class LoopStage(StageModel):
    """The body runs up to `count` times; it stops early after an iteration whose checker passed."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["loop"] = "loop"
    id: NodeId
    body: list[OperatorNode]
    count: int = Field(ge=1, le=MAX_NUMBER)


class LoopBlueprint(KindBlueprint):
    kind: Literal["loop"] = "loop"
    operators: list[str]
    count: int
    prompts: list[str | None] | None = None


class LoopKind(StageKind[LoopStage, LoopBlueprint]):
    name = "loop"
    is_structure = True
    stage_type = LoopStage
    blueprint_type = LoopBlueprint
    summary = "the body runs up to `count` times and stops early once a checker in it passes"
    dialect_help = (
        "- Add a loop (the body runs up to n times and stops early once a checker in it passes):\n"
        "  <action>add</action><structure>loop</structure><operators>A, B</operators><count>n</count>"
    )
    milestone_bonus = 0.1
    dsl_opener = "("
    dsl_tokens = ("(", ")", "*")

    def slots(self, blueprint: LoopBlueprint) -> list[Slot]:
        n = len(blueprint.operators)
        return [
            Slot(suffix=f"_l{i}", role=f"body {i + 1}/{n}", operator=op) for i, op in enumerate(blueprint.operators)
        ]

    def with_operators(self, blueprint: LoopBlueprint, names: list[str]) -> LoopBlueprint:
        return blueprint.model_copy(update={"operators": list(names)})

    def build(self, blueprint: LoopBlueprint, stage_id: str, nodes: list[OperatorNode]) -> LoopStage:
        return LoopStage(id=stage_id, body=nodes, count=blueprint.count)

    def children(self, stage: LoopStage) -> list[OperatorNode]:
        return list(stage.body)

    def blueprint_of(self, stage: LoopStage) -> LoopBlueprint:
        return LoopBlueprint(
            operators=[b.operator for b in stage.body], count=stage.count, prompts=[b.prompt for b in stage.body]
        )

    def validate(self, blueprint: LoopBlueprint, rules: CanvasRules) -> None:
        limits = rules.limits
        if not 1 <= len(blueprint.operators) <= limits.max_loop_body:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"A loop body needs 1 to {limits.max_loop_body} operators; got {len(blueprint.operators)}.",
            )
        if not 1 <= blueprint.count <= limits.max_loop_count:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"Loop count must be between 1 and {limits.max_loop_count}; got {show_int(blueprint.count)}.",
            )

    def without_child(self, stage: LoopStage, child_id: str) -> LoopStage | None:
        if len(stage.body) <= 1:
            return None
        return stage.model_copy(update={"body": [b for b in stage.body if b.id != child_id]})

    def describe(self, blueprint: LoopBlueprint) -> str:
        return f"loop ({_ARROW.join(blueprint.operators)}) * {blueprint.count}"

    def planned_calls(self, stage: LoopStage) -> int:
        return len(stage.body) * stage.count

    def render_dsl(self, stage: LoopStage) -> str:
        return "(" + _ARROW.join(b.operator for b in stage.body) + f") * {stage.count}"

    def parse_dsl_prefix(self, reader: DslReader) -> LoopBlueprint:
        ops = [reader.operator()]
        reader.no_samples("inside a loop")
        while reader.at("->"):
            reader.expect("->")
            ops.append(reader.operator())
            reader.no_samples("inside a loop")
        reader.expect(")")
        reader.expect("*")
        count = reader.bounded_int("the loop count", "; write a small number of iterations")
        return LoopBlueprint(operators=ops, count=count)

    def mermaid(self, stage: LoopStage, box: Box) -> MermaidPart:
        lines = [f'    subgraph {stage.id}["{self.render_dsl(stage)}"]']
        lines.extend("    " + box(b) for b in stage.body)
        lines.extend(f"        {a.id} --> {b.id}" for a, b in zip(stage.body, stage.body[1:], strict=False))
        lines.append("    end")
        lines.append(f"    {stage.body[-1].id} -. repeat up to {stage.count}x .-> {stage.body[0].id}")
        return MermaidPart(lines=lines, entry=[stage.body[0].id], exits=[stage.body[-1].id])

    def from_tags(self, tags: TagReader) -> LoopBlueprint:
        ops = tags.operators("operators", "a loop lists its body operators")
        count = tags.integer("count")
        return LoopBlueprint(operators=ops, count=DEFAULT_LOOP_COUNT if count is None else count)

    def to_tags(self, blueprint: LoopBlueprint, *, inline_prompt: bool = False) -> str:
        operators = ", ".join(blueprint.operators)
        return f"<structure>{self.name}</structure><operators>{operators}</operators><count>{blueprint.count}</count>"

    def drawing(self, stage: LoopStage) -> Drawing:
        note = f"× {stage.count} · stops early once a check passes"
        return Drawing(REPEAT, tuple(stage.body), caption=self.name, note=note)

    def from_tool(self, args: StructureArgs) -> LoopBlueprint:
        operators = args.operator_list(self.name)
        if args.count is None:
            raise StructureArgsError("A loop needs `count` (maximum iterations, 1-10).")
        return LoopBlueprint(operators=operators, count=args.count, prompts=args.prompts)


LOOP = LoopKind()
